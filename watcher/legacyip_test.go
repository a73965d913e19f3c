package watcher

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// IPv4 written with leading zeros is read as decimal and written
// canonically, as kube-proxy's ParseIPSloppy reads it, wherever an address
// appears: the service is served, not refused.
func TestLegacyIPv4LeadingZeros(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "198.018.000.010"
		s.Spec.ClusterIPs = []string{"198.18.0.10"} // the same address
		s.Spec.ExternalIPs = []string{"192.000.002.050"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.051.100.007"}}
	})
	slice := newSlice("web-1", newEndpoint("192.0.2.011", "node-a", readyEP))
	if err := ValidateEndpointSlice(slice); err != nil {
		t.Fatalf("slice refused: %v", err)
	}
	got := buildOne(t, svc, []*discoveryv1.EndpointSlice{slice}, Options{NodeName: "node-a"})
	sp := got.GetServicePort()
	for field, c := range map[string][2][]string{
		"cluster IPs":        {sp.GetClusterIps().GetV4(), {"198.18.0.10"}},
		"external IPs":       {sp.GetExternalIps().GetV4(), {"192.0.2.50"}},
		"load-balancer IPs":  {sp.GetLoadBalancerIps().GetV4(), {"198.51.100.7"}},
		"endpoint addresses": {got.GetEndpoints()[0].GetIps(), {"192.0.2.11"}},
	} {
		if !slices.Equal(c[0], c[1]) {
			t.Errorf("%s: %v, want %v", field, c[0], c[1])
		}
	}
}
