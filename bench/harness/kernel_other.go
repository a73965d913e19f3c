//go:build !linux

package harness

import "context"

// startKernel: the kernel peer is nftables, Linux only.
func startKernel(context.Context, *Options, *Backends) (stop func(), err error) { return nil, nil }
