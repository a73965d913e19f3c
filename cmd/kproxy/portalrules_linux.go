package main

import (
	"context"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/iptables"
	"github.com/kproxy/kproxy/portal/rules/nftables"
)

// newKernelRules opens the kernel modes Linux has; nil, nil for the others.
func newKernelRules(ctx context.Context, mode string, o rules.Options) (rules.Interface, error) {
	if mode == datapath.ModeNftables || mode == datapath.ModeIPTables {
		if err := requireNetAdmin(mode); err != nil {
			return nil, err
		}
	}
	switch mode {
	case datapath.ModeNftables:
		return nftables.New(ctx, o)
	case datapath.ModeIPTables:
		return iptables.New(ctx, o)
	}
	return nil, nil
}
