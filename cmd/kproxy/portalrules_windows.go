package main

import (
	"context"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/netsh"
)

// newKernelRules opens the kernel mode Windows has; nil, nil for the others.
func newKernelRules(ctx context.Context, mode string, o rules.Options) (rules.Interface, error) {
	if mode == datapath.ModeNetsh {
		return netsh.New(ctx, o)
	}
	return nil, nil
}
