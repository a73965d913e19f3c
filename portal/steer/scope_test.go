package steer

import (
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// Only under both traffic policies Local, in a kernel mode with a second
// proxy port, does that port serve the cluster's endpoints.
func TestClusterScopeOnExternalPort(t *testing.T) {
	local := messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	both := &messages.ServicePort{InternalTrafficPolicy: local, ExternalTrafficPolicy: local}
	for _, tc := range []struct {
		name string
		sp   *messages.ServicePort
		mode string
		ext  int
		want bool
	}{
		{"both Local, nftables", both, ModeNftables, 40001, true},
		{"bind mode", both, ModeBind, 0, false},
		{"no second proxy port", both, ModeIPTables, 0, false},
		{"only external Local", &messages.ServicePort{ExternalTrafficPolicy: local}, ModeNftables, 40001, false},
	} {
		if got := ClusterScopeOnExternalPort(tc.sp, tc.mode, tc.ext); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
