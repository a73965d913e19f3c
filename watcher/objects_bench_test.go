package watcher

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkObjectsSliceChange is one EndpointSlice change of a
// LoadBalancer Service with three ports, source ranges and kproxy
// annotations, built for one node and the Tracker's diff, as a node's
// Watcher does it: the cost an endpoint change pays before any actor.
func BenchmarkObjectsSliceChange(b *testing.B) {
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.Nop())
	o.Apply(ServiceEvent(Added, newService(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "198.51.100.0/24"}
		s.Annotations = map[string]string{"kproxy.io/proxy-protocol": "v2"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443, NodePort: 30443},
			corev1.ServicePort{Name: "metrics", Port: 9090})
	})))
	tr := NewTracker(o)
	tr.Mark("default/web")
	tr.Flush()
	slices := make([]*discoveryv1.EndpointSlice, 2)
	for i := range slices {
		var eps []discoveryv1.Endpoint
		for j := range 10 {
			eps = append(eps, newEndpoint(fmt.Sprintf("192.0.2.%d", 10*i+j+1), fmt.Sprintf("node-%c", 'a'+j%3), readyEP))
		}
		slices[i] = newSlice("web-a", eps...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.Handle(EndpointSliceEvent(Updated, slices[i%2]))
		if ch, _ := tr.FlushUnpaced(); len(ch.Upserts) == 0 {
			b.Fatal("no change")
		}
	}
}
