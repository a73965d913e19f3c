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
