package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/kproxy/kproxy/messages"
)

// The JSON shapes of KPNG's kpng-json output: its localnetv1.Service and
// Endpoint as Go's encoding/json writes the generated structs (field names
// as in the proto, empty fields left out, the protocol as its enum
// number), so jq scripts written for KPNG read kproxy's view unchanged.
type (
	jsonService struct {
		Namespace              string
		Name                   string
		Type                   string
		IPs                    jsonServiceIPs
		Ports                  []jsonPort    `json:",omitempty"`
		ExternalTrafficToLocal bool          `json:",omitempty"`
		SessionAffinity        *jsonAffinity `json:",omitempty"`
		InternalTrafficToLocal bool          `json:",omitempty"`
	}
	jsonServiceIPs struct {
		ClusterIPs      jsonIPSet
		ExternalIPs     jsonIPSet
		LoadBalancerIPs *jsonIPSet `json:",omitempty"`
		Headless        bool       `json:",omitempty"`
	}
	jsonIPSet struct {
		V4 []string `json:",omitempty"`
		V6 []string `json:",omitempty"`
	}
	jsonPort struct {
		Name           string `json:",omitempty"`
		Protocol       int32  // localnetv1.Protocol: TCP 1, UDP 2, SCTP 3
		Port           int32  `json:",omitempty"`
		NodePort       int32  `json:",omitempty"`
		TargetPort     int32  `json:",omitempty"`
		TargetPortName string `json:",omitempty"`
	}
	jsonAffinity struct {
		ClientIP struct{ TimeoutSeconds int32 }
	}
	jsonEndpoint struct {
		IPs   jsonIPSet
		Local bool `json:",omitempty"`
		// PortOverrides maps a service port name to the port its named
		// target port resolved to on this endpoint.
		PortOverrides map[string]int32 `json:",omitempty"`
	}
	jsonServiceEndpoints struct {
		Service   jsonService
		Endpoints []jsonEndpoint `json:",omitempty"`
	}
)

// kpngProtocol is localnetv1.Protocol's number.
func kpngProtocol(p messages.Protocol) int32 {
	switch p {
	case messages.Protocol_TCP:
		return 1
	case messages.Protocol_UDP:
		return 2
	case messages.Protocol_SCTP:
		return 3
	}
	return 0
}

// kpngJSON renders a state (service ports, as a source or the Watcher
// sees them) as one JSON line per service, services sorted by namespace
// and name, in the shape of KPNG's kpng-json.
func kpngJSON(state []*messages.ServicePortEndpoints) [][]byte {
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
					ClusterIPs:  ipSetJSON(sp.GetClusterIps()),
					ExternalIPs: ipSetJSON(sp.GetExternalIps()),
					Headless:    sp.GetHeadless(),
				},
				InternalTrafficToLocal: sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
				ExternalTrafficToLocal: sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
			}}, eps: map[string]*jsonEndpoint{}}
			if sp.GetLoadBalancerIps().Len() > 0 {
				lb := ipSetJSON(sp.GetLoadBalancerIps())
				g.out.Service.IPs.LoadBalancerIPs = &lb
			}
			if sp.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP {
				g.out.Service.SessionAffinity = &jsonAffinity{}
				g.out.Service.SessionAffinity.ClientIP.TimeoutSeconds = sp.GetAffinityTimeoutSeconds()
			}
			groups[id] = g
			order = append(order, id)
		}
		g.out.Service.Ports = append(g.out.Service.Ports, jsonPort{
			Name: k.GetPortName(), Protocol: kpngProtocol(k.GetProtocol()), Port: sp.GetPort(), NodePort: sp.GetNodePort(),
			TargetPort: sp.GetTargetPort(), TargetPortName: sp.GetTargetPortName(),
		})
		for _, e := range spe.GetEndpoints() {
			if !e.GetInternal() && !e.GetExternal() {
				continue // only for short-circuited traffic: not in KPNG's view
			}
			ipKey := strings.Join(e.GetIps(), ",")
			je := g.eps[ipKey]
			if je == nil {
				je = &jsonEndpoint{IPs: splitFamilies(e.GetIps()), Local: e.GetLocal()}
				g.eps[ipKey] = je
			}
			if sp.GetTargetPortName() != "" {
				if je.PortOverrides == nil {
					je.PortOverrides = map[string]int32{}
				}
				je.PortOverrides[k.GetPortName()] = e.GetPort()
			}
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
		slices.SortFunc(g.out.Service.Ports, func(a, b jsonPort) int {
			return strings.Compare(fmt.Sprintf("%s/%d", a.Name, a.Protocol), fmt.Sprintf("%s/%d", b.Name, b.Protocol))
		})
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
