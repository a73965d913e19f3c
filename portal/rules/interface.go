package rules

import (
	"context"
	"errors"
)

// Interface programs kernel portal rules. Implementations: nftables.Rules
// (Linux), iptables.Rules (Linux, legacy), netsh.Rules (Windows), and Fake
// for tests; Faulty wraps any of them for fault injection. They are
// stateless wrappers, as knftables is: the caller (the Rules actor) keeps
// the one record of what is programmed, plans each change against it
// (Set.Plan) and commits the change to it when the call succeeds. After a
// failed call the kernel may hold part of the change: only a Sync makes
// it known again. Calls are serialised by the implementation.
type Interface interface {
	// Sync replaces everything kproxy owns with exactly want (as Desired
	// makes it), in one transaction (full resync: on start, and after a
	// failure or someone flushed the table).
	Sync(ctx context.Context, want Set) error
	// Apply takes del out of the kernel and puts add in, in one
	// transaction, where cur is what is programmed (read, never kept):
	// del and add are cur.Plan's answer. Its cost follows the number of
	// changes, not of services: what the change starts and stops using
	// besides its rules is cur's to look up (UseChanges).
	Apply(ctx context.Context, cur *Programmed, del, add []Rule) error
	// Present reports whether kproxy's table, chains and hook rules still
	// exist, holding cur, so the caller can re-sync after someone flushed
	// them. It does not verify every map element.
	Present(ctx context.Context, cur Set) (bool, error)
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
