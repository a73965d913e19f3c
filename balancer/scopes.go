package balancer

import (
	"math/rand/v2"

	"github.com/kproxy/kproxy/messages"
)

// Scopes round-robins per traffic scope. kube-proxy splits a service's
// endpoints into the ones cluster-IP traffic may use (internal) and the
// ones external-IP, load-balancer and node-port traffic may use (external);
// the two differ when a traffic policy is Local. Each scope keeps its own
// position, so one scope's picks do not skew the other's spread.
type Scopes struct {
	internal, external *RoundRobin
}

// NewScopes returns empty Scopes; rand is as for NewRoundRobin.
func NewScopes(rand *rand.Rand) *Scopes {
	return &Scopes{internal: NewRoundRobin(rand), external: NewRoundRobin(rand)}
}

// Update replaces both scopes' endpoints from the node-local endpoint set.
// Endpoints without an address are left out.
func (s *Scopes) Update(endpoints []*messages.Endpoint) {
	var in, ex []string
	for _, e := range endpoints {
		addr := e.Address()
		if addr == "" {
			continue
		}
		if e.GetInternal() {
			in = append(in, addr)
		}
		if e.GetExternal() {
			ex = append(ex, addr)
		}
	}
	s.internal.Update(in)
	s.external.Update(ex)
}

// Next picks from the external scope when external is set, else from the
// internal one; see RoundRobin.Next.
func (s *Scopes) Next(external bool, exclude []string) (string, bool) {
	if external {
		return s.external.Next(exclude)
	}
	return s.internal.Next(exclude)
}

// Scope returns one scope's RoundRobin, for inspection.
func (s *Scopes) Scope(external bool) *RoundRobin {
	if external {
		return s.external
	}
	return s.internal
}
