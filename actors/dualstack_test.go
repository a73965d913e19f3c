package actors

import (
	"net"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
)

// A dual-stack service serves each family's frontend only from that
// family's endpoints, as kube-proxy does: an IPv6 client never reaches an
// IPv4 endpoint, nor the other way round.
func TestTCPDualStackKeepsFamiliesApart(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	v4 := tcpBackends(t, 1)
	b6, err := backends.StartTCP("backend-v6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(b6.Close)
	sp := svcPort("dual", messages.Protocol_TCP, "127.0.20.9", 18090)
	sp.ClusterIps.V6 = []string{"::1"}
	p.Submit(snapshot(1, spe(sp, endpoints(v4[0], b6.Addr()))))
	w.listening(t, sp.GetKey().ID(), 2, 1)

	for _, tc := range []struct{ frontend, want string }{
		{"127.0.20.9:18090", "backend-0"},
		{net.JoinHostPort("::1", "18090"), "backend-v6"},
	} {
		for range 10 {
			if got := dialName(t, tc.frontend); got != tc.want {
				t.Fatalf("%s reached %s, want only %s (its own family)", tc.frontend, got, tc.want)
			}
		}
	}
}
