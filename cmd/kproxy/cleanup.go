package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/bridgecapture"
)

// cleanupCommand removes every kernel rule kproxy owns, as
// `kube-proxy --cleanup` does: after a crash, or before switching modes.
func cleanupCommand(args []string) error {
	fs := flag.NewFlagSet("kproxy cleanup", flag.ContinueOnError)
	mode := fs.String("portal", "all", "which rules to remove: nftables, iptables, netsh or all")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	modes := []string{*mode}
	if *mode == "all" {
		modes = []string{datapath.ModeNftables, datapath.ModeIPTables, datapath.ModeNetsh} // those unavailable here are skipped
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, m := range modes {
		r, err := newRules(ctx, m, rules.Options{})
		if err != nil {
			if *mode == "all" {
				continue // that kind of rules cannot exist here
			}
			errs = append(errs, fmt.Errorf("cleanup %s: %w", m, err))
			continue
		}
		if r == nil {
			continue
		}
		if err := r.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: %w", m, err))
			continue
		}
		fmt.Printf("kproxy cleanup: %s rules removed\n", m)
		if m != datapath.ModeNetsh {
			// The transparent rules' companion, in either kernel mode.
			if err := bridgecapture.Cleanup(ctx); err != nil {
				errs = append(errs, fmt.Errorf("cleanup %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}
