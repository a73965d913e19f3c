//go:build !linux && !windows

package main

import (
	"context"

	"github.com/kproxy/kproxy/portal/rules"
)

// newKernelRules: no kernel mode here.
func newKernelRules(context.Context, string, rules.Options) (rules.Interface, error) {
	return nil, nil
}
