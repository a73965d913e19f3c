package balancer

import (
	"math/rand/v2"
	"net/netip"

	"github.com/kproxy/kproxy/messages"
)

// Scopes round-robins per traffic scope and IP family.
//
// kube-proxy splits a service's endpoints into the ones cluster-IP traffic
// may use (internal) and the ones external-IP, load-balancer and
// node-port traffic may use (external); the two differ when a traffic
// policy is Local. And it serves each family's frontends only from that
// family's endpoints: a client that came over IPv6 goes to an IPv6
// endpoint. A client's family is the frontend's (an IPv4 client reaches
// only IPv4 addresses, also through a dual-stack socket, where it shows as
// IPv4-mapped). Each pool keeps its own position, so one pool's picks do
// not skew another's spread.
type Scopes struct {
	// pools by external, then family: an array, not a map (smaller per
	// service port).
	pools [2][3]RoundRobin
}

type pool struct {
	external bool
	family   family
}

type family int

const (
	anyFamily family = iota // the client's family is unknown: every endpoint
	ipv4
	ipv6
)

func familyOf(ip string) family {
	addr, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return anyFamily
	case addr.Unmap().Is4():
		return ipv4
	default:
		return ipv6
	}
}

// NewScopes returns empty Scopes; rand is as for NewRoundRobin.
func NewScopes(rand *rand.Rand) *Scopes {
	if rand == nil {
		rand = newDefaultRand() // one for the six pools: they share an owner
	}
	s := &Scopes{}
	for i := range s.pools {
		for f := range s.pools[i] {
			s.pools[i][f].rand = rand
		}
	}
	return s
}

// Update replaces every pool's endpoints from the node-local endpoint set;
// with externalIsCluster, the external scope is the cluster's endpoints
// (see messages.SetEndpoints). Endpoints without an address are left out.
func (s *Scopes) Update(endpoints []*messages.Endpoint, externalIsCluster bool) {
	members := map[pool][]string{}
	for _, e := range endpoints {
		addr := e.Address()
		if addr == "" {
			continue
		}
		f := familyOf(e.GetIps()[0])
		for _, external := range []bool{false, true} {
			if InScope(e, external, externalIsCluster) {
				members[pool{external, anyFamily}] = append(members[pool{external, anyFamily}], addr)
				members[pool{external, f}] = append(members[pool{external, f}], addr)
			}
		}
	}
	for i := range s.pools {
		for f := range s.pools[i] {
			s.pools[i][f].Update(members[pool{i == 1, family(f)}])
		}
	}
}

// Next picks for a client (its IP decides the family) from the external
// scope when external is set, else from the internal one; see
// RoundRobin.Next.
func (s *Scopes) Next(external bool, clientIP string, exclude []string) (string, bool) {
	return s.poolFor(external, clientIP).Next(exclude)
}

// Members are the endpoints a client with clientIP picks from in one scope
// (read-only).
func (s *Scopes) Members(external bool, clientIP string) []string {
	return s.poolFor(external, clientIP).endpoints
}

// poolFor is the RoundRobin a client with clientIP uses in one scope.
func (s *Scopes) poolFor(external bool, clientIP string) *RoundRobin {
	return &s.pools[boolIndex(external)][familyOf(clientIP)]
}

// InScope reports whether e serves the external scope (external) or the
// internal one; with externalIsCluster the external scope is the
// cluster's endpoints.
func InScope(e *messages.Endpoint, external, externalIsCluster bool) bool {
	switch {
	case !external:
		return e.GetInternal()
	case externalIsCluster:
		return e.GetCluster()
	default:
		return e.GetExternal()
	}
}
