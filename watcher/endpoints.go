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
// only proxies to IP addresses, and so are slices labelled
// service.kubernetes.io/headless (unless this is a named proxier, which
// serves headless services), as kube-proxy's informers do. The result is
// sorted by name so that
// merging several slices is deterministic whatever order the caller used.
func slicesOf(svc *corev1.Service, all []*discoveryv1.EndpointSlice, opts Options) []*discoveryv1.EndpointSlice {
	ns := NamespaceOf(svc.Namespace)
	var own []*discoveryv1.EndpointSlice
	for _, s := range all {
		if s == nil || NamespaceOf(s.Namespace) != ns || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if _, headless := s.Labels[corev1.IsHeadlessService]; headless && opts.ServiceProxyName == "" {
			// kube-proxy's informers leave such slices out, as they
			// leave out such services (Skip).
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

// withEndpoints gives each defined port the endpoints node opts.NodeName
// (in zone opts.Zone) uses, from the service's own slices (slicesOf).
func withEndpoints(defs []portDefinition, own []*discoveryv1.EndpointSlice, opts Options) []*messages.ServicePortEndpoints {
	out := make([]*messages.ServicePortEndpoints, 0, len(defs))
	for _, d := range defs {
		candidates := collectEndpoints(d.port, own, opts.NodeName)
		eps := selectEndpoints(candidates, d.policy, opts.NodeName, opts.Zone,
			topologyLog{log: opts.TopologyLog, servicePort: d.sp.GetKey().ID()})
		out = append(out, &messages.ServicePortEndpoints{ServicePort: d.sp, Endpoints: eps})
	}
	return out
}

// collectEndpoints gathers every endpoint the slices offer for one service
// port, before readiness and traffic policies are applied.
//
// A slice serves a service port through its port of the same name and
// protocol; that port's number is the resolved target port, which is how a
// named targetPort ("http") becomes a number. A slice without such a port
// contributes nothing to this service port. Endpoints appearing in several
// slices (possible while the controller moves them) are kept once, first
// slice by name wins, except that a terminating endpoint gives way to a
// non-terminating one with the same address.
func collectEndpoints(port *corev1.ServicePort, own []*discoveryv1.EndpointSlice, nodeName string) []*messages.Endpoint {
	protocol, _ := parseProtocol(port.Protocol)
	var out []*messages.Endpoint
	seen := make(map[string]int) // address -> index in out
	for _, s := range own {
		target, ok := slicePort(s, port.Name, protocol)
		if !ok {
			continue
		}
		for i := range s.Endpoints {
			ep := endpoint(&s.Endpoints[i], target, nodeName)
			if ep == nil {
				continue
			}
			j, dup := seen[ep.Address()]
			switch {
			case !dup:
				seen[ep.Address()] = len(out)
				out = append(out, ep)
			case out[j].GetTerminating() && !ep.GetTerminating():
				// The pod network reused a terminating pod's IP for a new
				// pod: the running one wins, as in kube-proxy.
				out[j] = ep
			}
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

// endpoint maps one slice endpoint, applying the API's condition defaults
// as kube-proxy reads them: ready and serving unset mean true, terminating
// unset means false. An endpoint without addresses is unusable.
func endpoint(e *discoveryv1.Endpoint, port int32, nodeName string) *messages.Endpoint {
	if len(e.Addresses) == 0 {
		return nil
	}
	ready := e.Conditions.Ready == nil || *e.Conditions.Ready
	serving := e.Conditions.Serving == nil || *e.Conditions.Serving
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
		for _, n := range e.Hints.ForNodes {
			ep.NodeHints = append(ep.NodeHints, n.Name)
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
