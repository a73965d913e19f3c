package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// --portal auto picks the first kernel portal that works here: nftables,
// then iptables on Linux (kube-proxy's modes, iptables for nodes whose
// nft is missing or whose kernel lacks nf_tables), netsh on Windows. It
// never falls back to bind: bind listens on the service IPs themselves,
// and on a node they are not local addresses, so every port would fail
// to bind and be retried for ever. When no kernel portal works the start
// fails with each mode's cause. Where no kernel portal exists at all (not
// a Kubernetes node OS), auto is bind.

// autoModes are the modes auto tries, in order; none: bind.
func autoModes(goos string) []string {
	switch goos {
	case "linux":
		return []string{datapath.ModeNftables, datapath.ModeIPTables}
	case "windows":
		return []string{datapath.ModeNetsh}
	}
	return nil
}

// autoPortal returns the rules of the first mode of autoModes that works.
func autoPortal(ctx context.Context, ro rules.Options, log zerolog.Logger) (rules.Interface, string, error) {
	modes := autoModes(runtime.GOOS)
	if len(modes) == 0 {
		log.Info().Str("os", runtime.GOOS).Msg("--portal auto: no kernel portal on this OS; listening on service IPs directly (bind)")
		return nil, datapath.ModeBind, nil
	}
	var errs []error
	for _, mode := range modes {
		r, err := newRules(ctx, mode, ro)
		if err == nil {
			if len(errs) > 0 {
				log.Warn().Err(errors.Join(errs...)).Str("portal", mode).Msgf("--portal auto: using %s", mode)
			}
			return r, mode, nil
		}
		errs = append(errs, portalUnavailable(mode, err))
	}
	return nil, "", fmt.Errorf("--portal auto: no kernel portal works on this node, and bind would not serve service IPs that are not this node's own addresses (use --portal bind only where they are):\n%w", errors.Join(errs...))
}

// portalUnavailable says why mode cannot work, in the terms an operator
// acts on, with the tool's own error.
func portalUnavailable(mode string, err error) error {
	if cause := portalCause(mode, err); cause != "" {
		return fmt.Errorf("%s: %s (%w)", mode, cause, err)
	}
	return fmt.Errorf("%s: %w", mode, err)
}

// portalCause names the usual causes from the error of nft, the
// iptables tools or netsh; "" when it is none of them.
func portalCause(mode string, err error) string {
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	tool := map[string]string{datapath.ModeNftables: "nft (package nftables)", datapath.ModeIPTables: "iptables-save and iptables-restore (package iptables)", datapath.ModeNetsh: "netsh"}[mode]
	switch {
	case errors.Is(err, exec.ErrNotFound) || has("executable file not found", "no such file or directory: "+mode):
		return tool + " not installed or not in $PATH"
	case has("needs CAP_NET_ADMIN"):
		return "no permission: the process lacks CAP_NET_ADMIN"
	case has("Operation not permitted", "Permission denied", "you must be root", "Access is denied"):
		return "no permission: kproxy needs root (CAP_NET_ADMIN in the node's network namespace)"
	case mode == datapath.ModeNftables && has("Protocol not supported", "Could not process rule: No such file or directory"):
		return "the kernel lacks nf_tables (CONFIG_NF_TABLES, module nf_tables)"
	case mode == datapath.ModeIPTables && has("Table does not exist", "can't initialize"):
		return "the kernel lacks iptables' nat table (module iptable_nat)"
	case has("nft version must be"):
		return "nft is too old (v1.0.1 or later)"
	}
	return ""
}
