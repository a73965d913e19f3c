package steer

import (
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// Under both policies Local in a kernel mode, the Balancer's external
// scope is the cluster's endpoints; otherwise the endpoints go as they are.
func TestBalancerEndpoints(t *testing.T) {
	local := messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	eps := []*messages.Endpoint{{Ips: []string{"198.51.100.2"}, Port: 80, Cluster: true}}
	both := &messages.ServicePort{InternalTrafficPolicy: local, ExternalTrafficPolicy: local}
	got := BalancerEndpoints(both, ModeNftables, 40001, eps)
	if !got[0].GetExternal() || got[0].GetInternal() || eps[0].GetExternal() {
		t.Errorf("both Local, nftables: %v (input now %v); want the cluster endpoint external, the input untouched", got, eps)
	}
	for _, tc := range []struct {
		name string
		sp   *messages.ServicePort
		mode string
		ext  int
	}{
		{"bind mode", both, ModeBind, 0},
		{"no second proxy port", both, ModeIPTables, 0},
		{"only external Local", &messages.ServicePort{ExternalTrafficPolicy: local}, ModeNftables, 40001},
	} {
		if got := BalancerEndpoints(tc.sp, tc.mode, tc.ext, eps); got[0].GetExternal() {
			t.Errorf("%s: %v, want the endpoints as they are", tc.name, got)
		}
	}
}
