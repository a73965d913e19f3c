package watcher

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/test/modeltest"
)

// TestEndpointSelection covers readiness, the terminating fallback, the
// Local flag and the traffic policies; this node is node-a.
func TestEndpointSelection(t *testing.T) {
	local := ptr(corev1.ServiceInternalTrafficPolicyLocal)
	tests := []struct {
		name      string
		internal  *corev1.ServiceInternalTrafficPolicy
		external  corev1.ServiceExternalTrafficPolicy
		endpoints []discoveryv1.Endpoint
		want      []string
	}{
		{
			name: "ready endpoints serve both scopes",
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-a", readyEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{
				"10.1.0.1:8080[ready,serving,local,internal,external]",
				"10.1.0.2:8080[ready,serving,internal,external]",
			},
		},
		{
			name:      "unset conditions mean ready, serving, not terminating",
			endpoints: []discoveryv1.Endpoint{newEndpoint("10.1.0.1", "node-b", unsetEP)},
			want:      []string{"10.1.0.1:8080[ready,serving,internal,external]"},
		},
		{
			// The API and kube-proxy read serving unset as true, so this
			// endpoint is the terminating fallback.
			name: "serving unset means serving",
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "", conditions{ready: ptr(false), terminating: ptr(true)}),
			},
			want: []string{"10.1.0.1:8080[serving,terminating,internal,external]"},
		},
		{
			name: "not ready endpoints are dropped while others are ready",
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-b", notReadyEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
				newEndpoint("10.1.0.3", "node-b", terminatingEP),
			},
			want: []string{"10.1.0.2:8080[ready,serving,internal,external]"},
		},
		{
			name: "no ready endpoint falls back to serving terminating ones",
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-b", notReadyEP),
				newEndpoint("10.1.0.2", "node-b", terminatingEP),
				newEndpoint("10.1.0.3", "node-b", goneEP),
			},
			want: []string{"10.1.0.2:8080[serving,terminating,internal,external]"},
		},
		{
			name:     "internalTrafficPolicy Local keeps remote endpoints for external traffic only",
			internal: local,
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-a", readyEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{
				"10.1.0.1:8080[ready,serving,local,internal,external]",
				"10.1.0.2:8080[ready,serving,external]",
			},
		},
		{
			name:     "externalTrafficPolicy Local keeps remote endpoints for internal traffic only",
			external: corev1.ServiceExternalTrafficPolicyLocal,
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-a", readyEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{
				"10.1.0.1:8080[ready,serving,local,internal,external]",
				"10.1.0.2:8080[ready,serving,internal]",
			},
		},
		{
			// Remote endpoints stay as kube-proxy's cluster endpoints
			// (short-circuit, drop rather than reject), in neither scope.
			name:     "both policies Local keep remote endpoints out of both scopes",
			internal: local,
			external: corev1.ServiceExternalTrafficPolicyLocal,
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-a", readyEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{"10.1.0.1:8080[ready,serving,local,internal,external]", "10.1.0.2:8080[ready,serving]"},
		},
		{
			name:     "Local with no local endpoint leaves that scope empty",
			internal: local,
			external: corev1.ServiceExternalTrafficPolicyLocal,
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{"10.1.0.2:8080[ready,serving]"},
		},
		{
			// kube-proxy decides the fallback per scope, after the
			// locality filter.
			name:     "Local scope falls back to a local terminating endpoint",
			internal: local,
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "node-a", terminatingEP),
				newEndpoint("10.1.0.2", "node-b", readyEP),
			},
			want: []string{
				"10.1.0.1:8080[serving,terminating,local,internal]",
				"10.1.0.2:8080[ready,serving,external]",
			},
		},
		{
			name: "an endpoint without a node name is never local",
			endpoints: []discoveryv1.Endpoint{
				newEndpoint("10.1.0.1", "", readyEP),
			},
			want: []string{"10.1.0.1:8080[ready,serving,internal,external]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newService(func(s *corev1.Service) {
				// A node port, so external traffic exists and its policy counts.
				s.Spec.Type, s.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080
				s.Spec.InternalTrafficPolicy = tt.internal
				s.Spec.ExternalTrafficPolicy = tt.external
			})
			got := buildOne(t, svc, []*discoveryv1.EndpointSlice{newSlice("web-1", tt.endpoints...)}, Options{NodeName: "node-a"})
			if desc := modeltest.DescribeEndpoints(got.GetEndpoints()); !slices.Equal(desc, tt.want) {
				t.Fatalf("endpoints:\n got %q\nwant %q", desc, tt.want)
			}
		})
	}
}

// TestEndpointFields checks the per-endpoint data beyond the conditions.
func TestEndpointFields(t *testing.T) {
	ep := newEndpoint("10.1.0.1", "node-a", readyEP)
	ep.Addresses = append(ep.Addresses, "10.1.0.99")
	ep.Zone = ptr("zone-1")
	got := buildOne(t, newService(), []*discoveryv1.EndpointSlice{newSlice("web-1", ep)}, Options{NodeName: "node-a"}).GetEndpoints()
	if len(got) != 1 {
		t.Fatalf("got %d endpoints, want 1", len(got))
	}
	e := got[0]
	if !slices.Equal(e.GetIps(), []string{"10.1.0.1", "10.1.0.99"}) || e.GetPort() != 8080 ||
		e.GetNodeName() != "node-a" || e.GetZone() != "zone-1" || !e.GetLocal() {
		t.Fatalf("unexpected endpoint %v", e)
	}
}

// TestNamedTargetPort: the slice's port named like the service port gives
// the number a named targetPort resolves to.
func TestNamedTargetPort(t *testing.T) {
	svc := newService(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("web") })
	slice := newSlice("web-1", newEndpoint("10.1.0.1", "", readyEP))
	slice.Ports = []discoveryv1.EndpointPort{
		{Name: ptr("metrics"), Port: ptr[int32](9090)},
		{Name: ptr("http"), Port: ptr[int32](8443)},
	}
	got := buildOne(t, svc, []*discoveryv1.EndpointSlice{slice}, Options{})
	if got.GetServicePort().GetTargetPortName() != "web" {
		t.Fatalf("target port name = %q, want web", got.GetServicePort().GetTargetPortName())
	}
	if desc := modeltest.DescribeEndpoints(got.GetEndpoints()); !slices.Equal(desc, []string{"10.1.0.1:8443[ready,serving,internal,external]"}) {
		t.Fatalf("endpoints = %q, want the port resolved to 8443", desc)
	}
}

// TestSliceSelection: only this service's IP slices with a matching port
// contribute, merged across slices without duplicates and sorted.
func TestSliceSelection(t *testing.T) {
	other := func(mutate func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
		s := newSlice("other", newEndpoint("10.9.9.9", "", readyEP))
		mutate(s)
		return s
	}
	input := []*discoveryv1.EndpointSlice{
		newSlice("web-b",
			newEndpoint("10.1.0.10", "", readyEP),
			newEndpoint("10.1.0.2", "", readyEP), // also in web-a: kept once
		),
		newSlice("web-a",
			newEndpoint("10.1.0.2", "", readyEP),
			newEndpoint("10.1.0.1", "", readyEP),
		),
		nil,
		other(func(s *discoveryv1.EndpointSlice) { s.Namespace = "prod" }),
		other(func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "api" }),
		other(func(s *discoveryv1.EndpointSlice) { s.Labels = nil }),
		other(func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeFQDN }),
		other(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Name = ptr("metrics") }),
		other(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = ptr(corev1.ProtocolUDP) }),
		other(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = nil }),
		other(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = nil }),
	}
	got := buildOne(t, newService(), input, Options{})
	want := []string{
		"10.1.0.1:8080[ready,serving,internal,external]",
		"10.1.0.2:8080[ready,serving,internal,external]",
		"10.1.0.10:8080[ready,serving,internal,external]",
	}
	if desc := modeltest.DescribeEndpoints(got.GetEndpoints()); !slices.Equal(desc, want) {
		t.Fatalf("endpoints:\n got %q\nwant %q", desc, want)
	}
}

// TestUnnamedPortMatching: an unnamed service port matches a slice port
// whose name is empty or absent, and whose protocol is TCP or absent.
func TestUnnamedPortMatching(t *testing.T) {
	svc := newService(func(s *corev1.Service) { s.Spec.Ports[0].Name = "" })
	slice := newSlice("web-1", newEndpoint("10.1.0.1", "", readyEP))
	slice.Ports = []discoveryv1.EndpointPort{{Port: ptr[int32](8080)}}
	got := buildOne(t, svc, []*discoveryv1.EndpointSlice{slice}, Options{})
	if len(got.GetEndpoints()) != 1 {
		t.Fatalf("endpoints = %q, want one", modeltest.DescribeEndpoints(got.GetEndpoints()))
	}
}

// TestDualStackEndpoints: IPv4 and IPv6 slices of one service merge into
// one list, IPv4 first, addresses in canonical form.
func TestDualStackEndpoints(t *testing.T) {
	v6 := newSlice("web-v6", newEndpoint("FD00::B", "", readyEP), newEndpoint("fd00::a", "", readyEP))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	v4 := newSlice("web-v4", newEndpoint("10.1.0.1", "", readyEP))
	got := buildOne(t, newService(), []*discoveryv1.EndpointSlice{v6, v4}, Options{})
	want := []string{
		"10.1.0.1:8080[ready,serving,internal,external]",
		"[fd00::a]:8080[ready,serving,internal,external]",
		"[fd00::b]:8080[ready,serving,internal,external]",
	}
	if desc := modeltest.DescribeEndpoints(got.GetEndpoints()); !slices.Equal(desc, want) {
		t.Fatalf("endpoints:\n got %q\nwant %q", desc, want)
	}
}

// TestEndpointsPerServicePort: each service port gets the endpoints of its
// own slice port; a port the slices do not offer gets none.
func TestEndpointsPerServicePort(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "admin", Port: 9000},
		}
	})
	slice := newSlice("web-1", newEndpoint("10.1.0.1", "", readyEP))
	slice.Ports = []discoveryv1.EndpointPort{
		{Name: ptr("http"), Port: ptr[int32](8080)},
		{Name: ptr("dns"), Port: ptr[int32](5353), Protocol: ptr(corev1.ProtocolUDP)},
	}
	ports, err := BuildServicePorts(svc, []*discoveryv1.EndpointSlice{slice}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range ports {
		got[p.GetServicePort().GetKey().ID()] = modeltest.DescribeEndpoints(p.GetEndpoints())
	}
	want := map[string][]string{
		"default/web:http/TCP":  {"10.1.0.1:8080[ready,serving,internal,external]"},
		"default/web:dns/UDP":   {"10.1.0.1:5353[ready,serving,internal,external]"},
		"default/web:admin/TCP": {},
	}
	for key, w := range want {
		if !slices.Equal(got[key], w) {
			t.Errorf("%s: got %q, want %q", key, got[key], w)
		}
	}
}

// TestReusedAddressPrefersTheRunningEndpoint: when the pod network gives a
// terminating pod's IP to a new pod, both may be listed for a while; the
// running one is used, in whichever slice it comes (kube-proxy's rule).
func TestReusedAddressPrefersTheRunningEndpoint(t *testing.T) {
	old := newEndpoint("10.1.0.1", "node-a", terminatingEP)
	running := newEndpoint("10.1.0.1", "node-b", readyEP)
	for _, order := range [][2]discoveryv1.Endpoint{{old, running}, {running, old}} {
		got := buildOne(t, newService(), []*discoveryv1.EndpointSlice{newSlice("web-a", order[0]), newSlice("web-b", order[1])},
			Options{NodeName: "node-a"})
		want := []string{"10.1.0.1:8080[ready,serving,internal,external]"}
		if desc := modeltest.DescribeEndpoints(got.GetEndpoints()); !slices.Equal(desc, want) {
			t.Errorf("endpoints:\n got %q\nwant %q", desc, want)
		}
	}
}
