package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/conntrack"
)

// newRules returns the rules of a kernel portal mode (nftables and
// iptables on Linux, netsh on Windows), as kube-proxy picks its proxier in
// cmd/kube-proxy. It must run in the network namespace the rules are for.
// ModeBind needs no rules: it returns nil, nil.
func newRules(ctx context.Context, mode string, o rules.Options) (rules.Interface, error) {
	switch mode {
	case datapath.ModeBind:
		return nil, nil
	case datapath.ModeNftables, datapath.ModeIPTables, datapath.ModeNetsh:
		r, err := newKernelRules(ctx, mode, o)
		if r == nil && err == nil {
			return nil, fmt.Errorf("portal mode %s: not available on %s", mode, runtime.GOOS)
		}
		return r, err
	default:
		return nil, fmt.Errorf("unknown portal mode %q (want %s, %s, %s or %s)", mode, datapath.ModeBind, datapath.ModeNftables, datapath.ModeIPTables, datapath.ModeNetsh)
	}
}

// newFlows returns what clears the conntrack entries a mode's rules make
// stale: the NAT modes' (nftables, iptables) need it; nil for the others.
func newFlows(mode string) rules.Flows {
	switch mode {
	case datapath.ModeNftables, datapath.ModeIPTables:
		return conntrack.Table{}
	}
	return nil
}
