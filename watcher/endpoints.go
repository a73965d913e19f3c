package watcher

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kproxy/kproxy/messages"
)

// slicesOf keeps the slices that belong to svc: same namespace and labelled
// kubernetes.io/service-name=<svc.Name>, which is how the EndpointSlice
// controller ties them together. FQDN slices are dropped because kube-proxy
// only proxies to IP addresses. The result is sorted by name so that
// merging several slices is deterministic whatever order the caller used.
func slicesOf(svc *corev1.Service, all []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	ns := namespaceOf(svc.Namespace)
	var own []*discoveryv1.EndpointSlice
	for _, s := range all {
		if s == nil || namespaceOf(s.Namespace) != ns || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		own = append(own, s)
	}
	slices.SortFunc(own, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return own
}

// collectEndpoints gathers every endpoint the slices offer for one service
// port, before readiness and traffic policies are applied.
//
// A slice serves a service port through its port of the same name and
// protocol; that port's number is the resolved target port, which is how a
// named targetPort ("http") becomes a number. A slice without such a port
// contributes nothing to this service port. Endpoints appearing in several
// slices (possible while the controller moves them) are kept once, first
// slice by name wins.
func collectEndpoints(port *corev1.ServicePort, own []*discoveryv1.EndpointSlice, nodeName string) []*messages.Endpoint {
	protocol, _ := parseProtocol(port.Protocol)
	var out []*messages.Endpoint
	seen := make(map[string]bool)
	for _, s := range own {
		target, ok := slicePort(s, port.Name, protocol)
		if !ok {
			continue
		}
		for i := range s.Endpoints {
			ep := endpoint(&s.Endpoints[i], target, nodeName)
			if ep == nil || seen[ep.Address()] {
				continue
			}
			seen[ep.Address()] = true
			out = append(out, ep)
		}
	}
	sortEndpoints(out)
	return out
}

// slicePort finds the slice's port for a service port. A nil name or
// protocol in a slice means "" and TCP, as the API server defaults them.
func slicePort(s *discoveryv1.EndpointSlice, name string, protocol messages.Protocol) (int32, bool) {
	for _, p := range s.Ports {
		if p.Port == nil || *p.Port == 0 {
			continue // no number to dial
		}
		pname := ""
		if p.Name != nil {
			pname = *p.Name
		}
		var pproto corev1.Protocol
		if p.Protocol != nil {
			pproto = *p.Protocol
		}
		if got, ok := parseProtocol(pproto); ok && got == protocol && pname == name {
			return *p.Port, true
		}
	}
	return 0, false
}

// endpoint maps one slice endpoint, applying the API's condition defaults:
// ready unset means ready, serving unset means "same as ready", terminating
// unset means not terminating. An endpoint without addresses is unusable.
func endpoint(e *discoveryv1.Endpoint, port int32, nodeName string) *messages.Endpoint {
	if len(e.Addresses) == 0 {
		return nil
	}
	ready := e.Conditions.Ready == nil || *e.Conditions.Ready
	serving := ready
	if e.Conditions.Serving != nil {
		serving = *e.Conditions.Serving
	}
	terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating

	ep := &messages.Endpoint{
		Ips:         canonicalIPs(e.Addresses),
		Port:        port,
		Ready:       ready,
		Serving:     serving,
		Terminating: terminating,
	}
	if e.NodeName != nil {
		ep.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		ep.Zone = *e.Zone
	}
	ep.Local = ep.NodeName != "" && ep.NodeName == nodeName
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			ep.ZoneHints = append(ep.ZoneHints, z.Name)
		}
	}
	return ep
}

// canonicalIPs writes addresses canonically so "2001:DB8::1" and
// "2001:db8::1" dedupe as one endpoint; anything unparsable is kept as given.
func canonicalIPs(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		if ip, ok := parseIP(a); ok {
			out[i] = ip.String()
		} else {
			out[i] = a
		}
	}
	return out
}

// selectEndpoints applies kube-proxy's endpoint selection once per traffic
// scope and returns the endpoints usable by at least one scope, with their
// Internal, External and Cluster flags set.
//
// Cluster is the selection under a Cluster policy whatever the service's
// policies: kube-proxy's cluster endpoints, which local traffic to an
// external destination of an externalTrafficPolicy Local service uses, and
// whose presence makes a scope left without endpoints drop, not reject.
//
// Internal (cluster IP) traffic uses local endpoints only under
// internalTrafficPolicy Local; external traffic (external IPs, load
// balancer, node ports) likewise under externalTrafficPolicy Local.
//
// Under a Cluster policy, topology hints narrow the choice to the endpoints
// hinted for this node's zone, but only when every ready endpoint carries
// hints and at least one is hinted for the zone (kube-proxy's rule);
// otherwise hints are ignored.
func selectEndpoints(candidates []*messages.Endpoint, internalLocal, externalLocal bool, zone string) []*messages.Endpoint {
	internal := usable(candidates, internalLocal, zone)
	external := usable(candidates, externalLocal, zone)
	cluster := usable(candidates, false, zone)
	var out []*messages.Endpoint
	for _, ep := range candidates {
		ep.Internal = internal[ep]
		ep.External = external[ep]
		ep.Cluster = cluster[ep]
		if ep.Internal || ep.External || ep.Cluster {
			out = append(out, ep)
		}
	}
	return out
}

// usable picks one scope's endpoints: the ready ones among those the
// policy allows, or, when none is ready, those still serving while
// terminating, so connections keep working during a rolling update that
// leaves no ready endpoint (kube-proxy's terminating fallback). The fallback
// is decided per scope, after the locality filter, exactly as kube-proxy
// does: a Local policy falls back to a local terminating endpoint even when
// other nodes have ready ones.
func usable(candidates []*messages.Endpoint, localOnly bool, zone string) map[*messages.Endpoint]bool {
	if !localOnly && useTopology(candidates, zone) {
		hinted := make(map[*messages.Endpoint]bool)
		for _, ep := range candidates {
			if ep.Ready && slices.Contains(ep.GetZoneHints(), zone) {
				hinted[ep] = true
			}
		}
		return hinted
	}
	ready := make(map[*messages.Endpoint]bool)
	fallback := make(map[*messages.Endpoint]bool)
	for _, ep := range candidates {
		if localOnly && !ep.Local {
			continue
		}
		if ep.Ready {
			ready[ep] = true
		} else if ep.Serving && ep.Terminating {
			fallback[ep] = true
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return fallback
}

// useTopology reports whether zone hints apply: this node has a zone, every
// ready endpoint has hints, and one of them is hinted for the zone.
func useTopology(candidates []*messages.Endpoint, zone string) bool {
	if zone == "" {
		return false
	}
	forZone := false
	for _, ep := range candidates {
		if !ep.Ready {
			continue
		}
		if len(ep.GetZoneHints()) == 0 {
			return false
		}
		if slices.Contains(ep.GetZoneHints(), zone) {
			forZone = true
		}
	}
	return forZone
}

// sortEndpoints orders endpoints by address, then port, so that the same
// input always yields the same list and diffs between snapshots are stable.
func sortEndpoints(eps []*messages.Endpoint) {
	slices.SortStableFunc(eps, func(a, b *messages.Endpoint) int {
		if c := compareIP(a.GetIps()[0], b.GetIps()[0]); c != 0 {
			return c
		}
		return cmp.Compare(a.GetPort(), b.GetPort())
	})
}

// compareIP orders addresses numerically (10.0.0.2 before 10.0.0.10), IPv4
// before IPv6; unparsable strings sort after all addresses, by text.
func compareIP(a, b string) int {
	ia, okA := parseIP(a)
	ib, okB := parseIP(b)
	switch {
	case okA && okB:
		return ia.Compare(ib)
	case okA:
		return -1
	case okB:
		return 1
	}
	return cmp.Compare(a, b)
}
