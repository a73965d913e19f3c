package watcher

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/kproxy/kproxy/messages"
)

// The JSON shapes of KPNG's kpng-json output (localnetv1.Service and
// Endpoint), so tools written for KPNG can read kproxy's view.
type (
	jsonService struct {
		Namespace              string
		Name                   string
		Type                   string
		IPs                    jsonServiceIPs
		Ports                  []jsonPort
		SessionAffinity        *jsonAffinity `json:",omitempty"`
		InternalTrafficToLocal bool          `json:",omitempty"`
		ExternalTrafficToLocal bool          `json:",omitempty"`
	}
	jsonServiceIPs struct {
		ClusterIPs      jsonIPSet
		ExternalIPs     jsonIPSet
		LoadBalancerIPs jsonIPSet
		Headless        bool `json:",omitempty"`
	}
	jsonIPSet struct {
		V4 []string `json:",omitempty"`
		V6 []string `json:",omitempty"`
	}
	jsonPort struct {
		Name           string `json:",omitempty"`
		Protocol       string
		Port           int32
		NodePort       int32  `json:",omitempty"`
		TargetPort     int32  `json:",omitempty"`
		TargetPortName string `json:",omitempty"`
	}
	jsonAffinity struct {
		ClientIP struct{ TimeoutSeconds int32 }
	}
	jsonEndpoint struct {
		IPs    jsonIPSet
		Local  bool `json:",omitempty"`
		Scopes struct{ Internal, External bool }
		// PortOverrides maps a service port name to the endpoint's resolved port.
		PortOverrides map[string]int32 `json:",omitempty"`
	}
	jsonServiceEndpoints struct {
		Service   jsonService
		Endpoints []jsonEndpoint
	}
)

// KPNGJSON renders a state (service ports, as a source or the Watcher
// sees them) as one JSON line per service, services sorted by namespace
// and name, in the shape of KPNG's kpng-json.
func KPNGJSON(state []*messages.ServicePortEndpoints) [][]byte {
	type group struct {
		out *jsonServiceEndpoints
		eps map[string]*jsonEndpoint
	}
	groups := map[string]*group{}
	var order []string
	for _, spe := range state {
		sp := spe.GetServicePort()
		k := sp.GetKey()
		id := k.Service()
		g := groups[id]
		if g == nil {
			g = &group{out: &jsonServiceEndpoints{Service: jsonService{
				Namespace: k.GetNamespace(), Name: k.GetName(), Type: sp.GetType(),
				IPs: jsonServiceIPs{
					ClusterIPs:      ipSetJSON(sp.GetClusterIps()),
					ExternalIPs:     ipSetJSON(sp.GetExternalIps()),
					LoadBalancerIPs: ipSetJSON(sp.GetLoadBalancerIps()),
				},
				InternalTrafficToLocal: sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
				ExternalTrafficToLocal: sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
			}}, eps: map[string]*jsonEndpoint{}}
			if sp.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP {
				g.out.Service.SessionAffinity = &jsonAffinity{}
				g.out.Service.SessionAffinity.ClientIP.TimeoutSeconds = sp.GetAffinityTimeoutSeconds()
			}
			groups[id] = g
			order = append(order, id)
		}
		g.out.Service.Ports = append(g.out.Service.Ports, jsonPort{
			Name: k.GetPortName(), Protocol: k.GetProtocol().String(), Port: sp.GetPort(), NodePort: sp.GetNodePort(),
			TargetPort: sp.GetTargetPort(), TargetPortName: sp.GetTargetPortName(),
		})
		for _, e := range spe.GetEndpoints() {
			ipKey := strings.Join(e.GetIps(), ",")
			je := g.eps[ipKey]
			if je == nil {
				je = &jsonEndpoint{IPs: splitFamilies(e.GetIps()), Local: e.GetLocal(), PortOverrides: map[string]int32{}}
				g.eps[ipKey] = je
			}
			je.Scopes.Internal = je.Scopes.Internal || e.GetInternal()
			je.Scopes.External = je.Scopes.External || e.GetExternal()
			je.PortOverrides[k.GetPortName()] = e.GetPort()
		}
	}
	slices.Sort(order)
	lines := make([][]byte, 0, len(order))
	for _, id := range order {
		g := groups[id]
		keys := make([]string, 0, len(g.eps))
		for k := range g.eps {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g.out.Endpoints = append(g.out.Endpoints, *g.eps[k])
		}
		slices.SortFunc(g.out.Service.Ports, func(a, b jsonPort) int { return strings.Compare(a.Name+"/"+a.Protocol, b.Name+"/"+b.Protocol) })
		line, _ := json.Marshal(g.out) // plain structs: cannot fail
		lines = append(lines, line)
	}
	return lines
}

func ipSetJSON(s *messages.IPSet) jsonIPSet {
	return jsonIPSet{V4: s.GetV4(), V6: s.GetV6()}
}

func splitFamilies(ips []string) jsonIPSet {
	var out jsonIPSet
	for _, ip := range ips {
		if strings.Contains(ip, ":") {
			out.V6 = append(out.V6, ip)
		} else {
			out.V4 = append(out.V4, ip)
		}
	}
	return out
}
