package main

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// With the Kubernetes source, kproxy watch gives node-a the endpoint hinted
// for it (PreferSameNode), a node named in no hint the endpoints of the
// zone its Node's topology.kubernetes.io/zone label names, and no rule to
// a load-balancer IP the status reports in ipMode Proxy.
func TestKubeWatchTopologyAndIPMode(t *testing.T) {
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	ctx := context.Background()
	k.node("node-x", "zone-b")
	k.service("web", 80, intstr.FromInt32(8080), func(svc *corev1.Service) {
		svc.Spec.ClusterIP = s.ServiceIP(20).String()
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
	})
	web := k.slice("web", "web-1", 8080, readyEP("192.0.2.11"), readyEP("192.0.2.12"), readyEP("192.0.2.13"))
	for i, n := range []string{"a", "b", "c"} {
		web.Endpoints[i].NodeName = ptr.To("node-" + n)
		web.Endpoints[i].Zone = ptr.To("zone-" + n)
		web.Endpoints[i].Hints = &discoveryv1.EndpointHints{
			ForNodes: []discoveryv1.ForNode{{Name: "node-" + n}}, ForZones: []discoveryv1.ForZone{{Name: "zone-" + n}}}
	}
	k.apply(web)
	lb := k.service("lb", 80, intstr.FromInt32(8080), func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ClusterIP = s.ServiceIP(21).String()
	})
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "198.51.100.7", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
		{IP: "198.51.100.8", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
	}
	if _, err := s.Admin.CoreV1().Services("default").UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for node, want := range map[string][]string{"node-a": {"192.0.2.11"}, "node-x": {"192.0.2.12"}} {
		state, logs := watchFirstState(t, "--source", "kube", "--kubeconfig", s.KproxyKubeconfig, "--node-name", node,
			"--min-sync-period", "10ms")
		if got := state["web"].endpoints(); !slices.Equal(got, want) {
			t.Errorf("%s: web endpoints %v, want %v; logs:\n%s", node, got, want, logs)
		}
		if got := state["lb"].Service.IPs.LoadBalancerIPs; got == nil || !slices.Equal(got.V4, []string{"198.51.100.8"}) {
			t.Errorf("%s: lb load-balancer IPs %+v, want only the VIP-mode 198.51.100.8", node, got)
		}
	}
}
