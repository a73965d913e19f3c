//go:build !linux

package conntrack

import "github.com/kproxy/kproxy/portal/rules"

// Table is a no-op where the kernel has no conntrack table kproxy's rules
// use (netsh portals add service IPs instead of NAT).
type Table struct{}

// ClearStale does nothing here.
func (Table) ClearStale([]rules.Rule) (int, error) { return 0, nil }
