package balancer

import (
	"time"

	"github.com/kproxy/kproxy/messages"
)

// ScopedAffinity is ClientIP affinity per traffic scope: a client pinned
// through the cluster IP (internal scope) has its own pin through external
// IPs and node ports (external scope), so externalTrafficPolicy Local never
// sends external traffic to an endpoint only the internal scope allows.
// Each scope's pins are dropped when their endpoint leaves that scope.
type ScopedAffinity struct {
	internal, external *AffinityTable
}

// NewScopedAffinity returns empty tables; ttl and now are as for
// NewAffinityTable.
func NewScopedAffinity(ttl time.Duration, now func() time.Time) *ScopedAffinity {
	return &ScopedAffinity{internal: NewAffinityTable(ttl, now), external: NewAffinityTable(ttl, now)}
}

// Table is one scope's table.
func (a *ScopedAffinity) Table(external bool) *AffinityTable {
	if external {
		return a.external
	}
	return a.internal
}

// SetTTL sets both scopes' timeout.
func (a *ScopedAffinity) SetTTL(ttl time.Duration) {
	a.internal.SetTTL(ttl)
	a.external.SetTTL(ttl)
}

// Retain drops the pins whose endpoint is no longer in its scope (the
// external one the cluster's with externalIsCluster, as Scopes.Update).
func (a *ScopedAffinity) Retain(endpoints []*messages.Endpoint, externalIsCluster bool) {
	internal, external := map[string]bool{}, map[string]bool{}
	for _, e := range endpoints {
		internal[e.Address()] = internal[e.Address()] || InScope(e, false, externalIsCluster)
		external[e.Address()] = external[e.Address()] || InScope(e, true, externalIsCluster)
	}
	a.internal.Retain(func(ep string) bool { return internal[ep] })
	a.external.Retain(func(ep string) bool { return external[ep] })
}

// Pick returns the client's pinned endpoint in the scope, or pins and
// returns fallback (the round-robin choice) when it has none; see
// AffinityTable.Lookup for exclude.
func (a *ScopedAffinity) Pick(external bool, clientIP string, exclude []string, fallback string) (endpoint string, pinned bool) {
	t := a.Table(external)
	if ep, ok := t.Lookup(clientIP, exclude); ok {
		return ep, true
	}
	if fallback != "" {
		t.Record(clientIP, fallback)
	}
	return fallback, false
}

// Sweep drops expired pins of both scopes.
func (a *ScopedAffinity) Sweep() {
	a.internal.Sweep()
	a.external.Sweep()
}
