package main

import (
	"context"

	"github.com/kproxy/kproxy/portal"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/iptables"
	"github.com/kproxy/kproxy/portal/rules/nftables"
)

// newKernelRules opens the kernel modes Linux has; nil, nil for the others.
func newKernelRules(ctx context.Context, mode string, o rules.Options) (rules.Interface, error) {
	if mode == portal.ModeNftables || mode == portal.ModeIPTables {
		if err := requireNetAdmin(mode); err != nil {
			return nil, err
		}
	}
	switch mode {
	case portal.ModeNftables:
		return nftables.New(ctx, o)
	case portal.ModeIPTables:
		return iptables.New(ctx, o)
	}
	return nil, nil
}
