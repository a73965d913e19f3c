package watcher

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// loadBalancerSourceRanges reads the field as kube-proxy does: trimmed,
// leading zeros as decimal, masked, both families; a bad entry is ignored
// with an error naming it and the rest kept.
func TestLoadBalancerSourceRanges(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{LoadBalancerSourceRanges: []string{
		" 192.0.2.3/32 ", "not-a-cidr", "203.0.113.77/24", "2001:db8:1::5/48", "", "198.051.100.0/24", "192.0.2.3/32",
	}}}
	got, bad := loadBalancerSourceRanges(svc)
	want := []string{"192.0.2.3/32", "203.0.113.0/24", "2001:db8:1::/48", "198.51.100.0/24"}
	if !slices.Equal(got, want) {
		t.Errorf("ranges %v, want %v", got, want)
	}
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), `spec.loadBalancerSourceRanges[1]: "not-a-cidr"`) {
		t.Errorf("errors %v, want one naming entry 1", bad)
	}
}

// A file whose service has a bad source range loads the service with the
// others, and reports the bad entry.
func TestFileSourceIgnoresInvalidSourceRange(t *testing.T) {
	doc := `apiVersion: v1
kind: Service
metadata: {name: fw, namespace: ns}
spec:
  type: LoadBalancer
  clusterIP: 198.18.0.42
  loadBalancerSourceRanges: [192.0.2.3/32, 192.0.2.300/32]
  ports: [{port: 80}]
status: {loadBalancer: {ingress: [{ip: 198.18.2.42}]}}
`
	res := decodeInputs([]input{{name: "fw.yaml", data: []byte(doc)}}).result(Options{NodeName: "node"})
	if len(res.Errors) != 0 || len(res.ServicePorts) != 1 {
		t.Fatalf("errors %v, %d service ports; want the service loaded", res.Errors, len(res.ServicePorts))
	}
	if got := res.ServicePorts[0].GetServicePort().GetLoadBalancerSourceRanges(); !slices.Equal(got, []string{"192.0.2.3/32"}) {
		t.Errorf("source ranges %v, want [192.0.2.3/32]", got)
	}
	if len(res.InvalidCIDRs) != 1 || !strings.Contains(res.InvalidCIDRs[0].Error(), "192.0.2.300/32") {
		t.Errorf("InvalidCIDRs %v, want the bad entry named", res.InvalidCIDRs)
	}
}
