package rules

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/steer"
)

// Verdict is what a service port's rules do with one traffic scope: the
// message type the Rules actor receives it in.
type Verdict = messages.PortalVerdict

const (
	// Serve redirects the scope's traffic to its proxy port.
	Serve = messages.PortalVerdict_PORTAL_VERDICT_SERVE
	// RejectAll: the service has no usable endpoint at all; new
	// connections are rejected at once (clients fail fast).
	RejectAll = messages.PortalVerdict_PORTAL_VERDICT_REJECT
	// DropAll: the service has endpoints, but none the scope's traffic
	// policy lets it use (Local without a local one); new connections are
	// dropped, as kube-proxy does.
	DropAll = messages.PortalVerdict_PORTAL_VERDICT_DROP
)

// ForServicePort lists the kernel portal rules of one service port: its cluster
// IPs at the service port to proxyPort, and its external and load-balancer
// IPs and node port to externalProxyPort (proxyPort when zero), with the
// verdict of each scope (internal: cluster IPs; external: the rest).
//
// Under externalTrafficPolicy Local with two proxy ports, the external
// rules short-circuit traffic from the node itself and from pods to the
// proxy port serving the cluster's endpoints: proxyPort under
// internalTrafficPolicy Cluster; under Local, externalProxyPort, and the
// rest of external traffic goes to proxyPort, whose endpoints are the same
// local ones (steer.ClusterScopeOnExternalPort). Load-balancer IPs carry
// the service's source ranges of their family.
func ForServicePort(sp *messages.ServicePort, proxyPort, externalProxyPort int, internalVerdict, externalVerdict Verdict) ([]Rule, error) {
	network, err := steer.Network(sp.GetKey().GetProtocol())
	if err != nil {
		return nil, err
	}
	shortCircuit := 0
	if externalProxyPort != 0 && externalProxyPort != proxyPort &&
		sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL && externalVerdict != RejectAll {
		shortCircuit = proxyPort
		if sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL {
			shortCircuit, externalProxyPort = externalProxyPort, proxyPort
		}
	}
	if externalProxyPort == 0 {
		externalProxyPort = proxyPort
	}
	internal := Rule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: proxyPort, ClusterIP: true}
	internal.Reject, internal.Drop = internalVerdict == RejectAll, internalVerdict == DropAll
	external := Rule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: externalProxyPort, ShortCircuitPort: shortCircuit}
	external.Reject, external.Drop = externalVerdict == RejectAll, externalVerdict == DropAll
	var rules []Rule
	for _, set := range []struct {
		ips  *messages.IPSet
		base Rule
		lb   bool
	}{{sp.GetClusterIps(), internal, false}, {sp.GetExternalIps(), external, false}, {sp.GetLoadBalancerIps(), external, true}} {
		base := set.base
		for _, s := range set.ips.All() {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue // the watcher validated IPs; skip rather than fail the port
			}
			r := base
			r.IP, r.Port = ip.Unmap(), int(sp.GetPort())
			if set.lb {
				r.SourceRanges = sourceRanges(sp.GetLoadBalancerSourceRanges(), r.IP.Is4())
			}
			rules = append(rules, r)
		}
	}
	if np := sp.GetNodePort(); np != 0 {
		r := external
		r.NodePort, r.Port = true, int(np)
		rules = append(rules, r)
	}
	return rules, nil
}

// sourceRanges are the canonical prefixes of one family among ranges
// (which the watcher validated), comma-separated.
func sourceRanges(ranges []string, v4 bool) string {
	var out []string
	for _, s := range ranges {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4() != v4 {
			continue
		}
		out = append(out, p.Masked().String())
	}
	return strings.Join(out, ",")
}

// Verdicts decides, from a service port's node-local endpoints, what its
// rules do with each scope, as kube-proxy does: serve a scope that has
// endpoints; when none, reject if the service has no usable endpoint
// anywhere, else drop. Cluster-IP traffic uses the internal scope,
// external-IP, load-balancer and node-port traffic the external one.
func Verdicts(endpoints []*messages.Endpoint) (internal, external Verdict) {
	var hasInternal, hasExternal, hasAny bool
	for _, e := range endpoints {
		hasInternal = hasInternal || e.GetInternal()
		hasExternal = hasExternal || e.GetExternal()
		hasAny = hasAny || e.GetInternal() || e.GetExternal() || e.GetCluster()
	}
	verdict := func(has bool) Verdict {
		switch {
		case has:
			return Serve
		case hasAny:
			return DropAll
		default:
			return RejectAll
		}
	}
	return verdict(hasInternal), verdict(hasExternal)
}

// Clash is a rule a service port asked for whose key another service port
// already holds (two services claiming one IP:port). It is not programmed.
type Clash struct {
	ServicePort, Owner string
	Key                Key
}

// Flatten lists the rules of the changing service ports (by service port
// ID) in ID order, leaving out every rule whose key another service port
// holds: one programmed for a service port that is not changing, or an
// earlier one in ID order. A clash between two services must not fail
// everyone's transaction.
func Flatten(changing map[string][]Rule, programmed Set) ([]Rule, []Clash) {
	ids := make([]string, 0, len(changing))
	for id := range changing {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	claimed := map[Key]string{} // by the changing service ports, in ID order
	var out []Rule
	var clashes []Clash
	for _, id := range ids {
		for _, r := range changing[id] {
			k := r.Key()
			owner, ok := claimed[k]
			if !ok {
				if old, held := programmed[k]; held && old.ServicePort != id {
					if _, moving := changing[old.ServicePort]; !moving {
						owner, ok = old.ServicePort, true
					}
				}
			}
			if ok && owner != id {
				clashes = append(clashes, Clash{ServicePort: id, Owner: owner, Key: k})
				continue
			}
			claimed[k] = id
			out = append(out, r)
		}
	}
	return out, clashes
}
