package watcher

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A load-balancer ingress IP in ipMode Proxy gets no rule (kube-proxy's
// IsVIPMode): the load balancer proxies to the node, so packets for that
// IP never arrive here. Unset and VIP mean VIP; any other value is not VIP.
func TestLoadBalancerIPModeProxy(t *testing.T) {
	proxy, vip, other := corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPMode("Tunnel")
	svc := newService(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerIP = "198.51.100.1" // requested, reported below in Proxy mode
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "198.51.100.1", IPMode: &proxy},
			{IP: "198.51.100.2", IPMode: &vip},
			{IP: "198.51.100.3"},
			{IP: "2001:db8::4", IPMode: &proxy},
			{IP: "198.51.100.5", IPMode: &other},
		}
	})
	got := buildOne(t, svc, nil, Options{}).GetServicePort().GetLoadBalancerIps()
	if !slices.Equal(got.GetV4(), []string{"198.51.100.2", "198.51.100.3"}) || len(got.GetV6()) != 0 {
		t.Fatalf("load-balancer IPs %v, want only the VIP-mode 198.51.100.2 and 198.51.100.3", got)
	}
}
