package rules

import (
	"context"
	"errors"
)

// Interface programs kernel portal rules. Implementations: nftables.Rules
// (Linux), iptables.Rules (Linux, legacy), netsh.Rules (Windows), and Fake
// for tests; Faulty wraps any of them for fault injection. Calls are
// serialised by the implementation; a caller (the Rules actor) batches
// changes and calls Apply once per batch.
//
// Implementations remember what they programmed; when Apply fails (for
// example because someone deleted kproxy's rules underneath), the caller
// should check Present and call Sync with the whole desired set.
type Interface interface {
	// Sync replaces everything kproxy owns with exactly rules, in one
	// transaction (full resync: on start, and after someone flushed the
	// table). Duplicate keys with different values are an error.
	Sync(ctx context.Context, rules []Rule) error
	// Apply removes removals (only their keys matter; absent ones are
	// ignored) and then adds or replaces upserts, in one transaction. Its
	// cost follows the number of changes, not of services. Upserting a rule
	// identical to the programmed one is a no-op.
	Apply(ctx context.Context, upserts, removals []Rule) error
	// Present reports whether kproxy's table, chains and hook rules still
	// exist, so the caller can re-sync after someone flushed them. It does
	// not verify every map element.
	Present(ctx context.Context) (bool, error)
	// Cleanup removes every rule, chain and table kproxy owns (kproxy
	// cleanup; a normal shutdown leaves them for the next kproxy). It
	// succeeds when there is nothing to remove.
	Cleanup(ctx context.Context) error
}

// ErrFamilyUnavailable is returned for rules of an IP family the backend
// cannot program (for example IPv6 without ip6tables). It does not fail
// the call: the other rules are programmed and the call counts as done.
var ErrFamilyUnavailable = errors.New("IP family not available")

// Flows clears the kernel's connection-tracking entries that programmed
// rules have made stale (package conntrack on Linux). The kernel NATs an
// established UDP flow by its entry, not by the rules: without this a
// client that keeps its source port keeps going to a proxy port that is
// gone, or past a rule that now rejects.
type Flows interface {
	// ClearStale deletes the UDP entries NATed for the frontends of rs to
	// anything but their proxy port (for a rule that rejects, all of them)
	// and reports how many went.
	ClearStale(rs []Rule) (int, error)
}
