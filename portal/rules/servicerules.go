package rules

import (
	"net/netip"
	"slices"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
)

// ForServicePort lists the kernel portal rules of one service port: its cluster
// IPs at the service port to proxyPort, and its external and load-balancer
// IPs and node port to externalProxyPort (proxyPort when zero). A scope
// without endpoints gets rejects instead, so clients fail fast rather than
// time out.
func ForServicePort(sp *messages.ServicePort, proxyPort, externalProxyPort int, rejectInternal, rejectExternal bool) ([]Rule, error) {
	network, err := portal.Network(sp.GetKey().GetProtocol())
	if err != nil {
		return nil, err
	}
	if externalProxyPort == 0 {
		externalProxyPort = proxyPort
	}
	internal := Rule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: proxyPort, Reject: rejectInternal}
	external := Rule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: externalProxyPort, Reject: rejectExternal}
	var rules []Rule
	for _, set := range []struct {
		ips  *messages.IPSet
		base Rule
	}{{sp.GetClusterIps(), internal}, {sp.GetExternalIps(), external}, {sp.GetLoadBalancerIps(), external}} {
		base := set.base
		for _, s := range set.ips.All() {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue // the watcher validated IPs; skip rather than fail the port
			}
			r := base
			r.IP, r.Port = ip.Unmap(), int(sp.GetPort())
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

// Rejects reports which traffic scopes of a service port have no endpoint,
// so its rules reject them: cluster-IP traffic uses the internal scope,
// external-IP, load-balancer and node-port traffic the external one.
func Rejects(endpoints []*messages.Endpoint) (internal, external bool) {
	internal, external = true, true
	for _, e := range endpoints {
		internal = internal && !e.GetInternal()
		external = external && !e.GetExternal()
	}
	return internal, external
}

// Clash is a rule a service port asked for whose key another service port
// already holds (two services claiming one IP:port). It is not programmed.
type Clash struct {
	ServicePort, Owner string
	Key                Key
}

// Flatten lists the rules of the changing service ports (by service port
// ID) in ID order, leaving out every rule whose key another service port
// holds: one in applied that is not changing, or an earlier one in ID
// order. A clash between two services must not fail everyone's transaction.
func Flatten(changing, applied map[string][]Rule) ([]Rule, []Clash) {
	claimed := map[Key]string{}
	for id, rs := range applied {
		if _, ok := changing[id]; !ok {
			for _, r := range rs {
				claimed[r.Key()] = id
			}
		}
	}
	ids := make([]string, 0, len(changing))
	for id := range changing {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []Rule
	var clashes []Clash
	for _, id := range ids {
		for _, r := range changing[id] {
			if owner, ok := claimed[r.Key()]; ok && owner != id {
				clashes = append(clashes, Clash{ServicePort: id, Owner: owner, Key: r.Key()})
				continue
			}
			claimed[r.Key()] = id
			out = append(out, r)
		}
	}
	return out, clashes
}
