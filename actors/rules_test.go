package actors

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
	"github.com/kproxy/kproxy/portal/rules"
)

// waitRules waits until ok holds for what fake has programmed. A fake is
// fine here: the kernel side is proven with real nftables and iptables in
// network namespaces (portal/rules/... and cmd/kproxy/e2e); this checks
// the actors' plumbing.
func waitRules(t *testing.T, fake *rules.Fake, ok func(rules.Set) bool) {
	t.Helper()
	if err := fake.Wait(10*time.Second, ok); err != nil {
		t.Fatal(err)
	}
}

// externalTrafficPolicy Local in a kernel mode: external traffic gets its
// own proxy port, served with the external scope (local endpoints only),
// while cluster-IP traffic uses every endpoint.
func TestKernelModeExternalTrafficPolicyLocal(t *testing.T) {
	fake := rules.NewFake()
	p := Start(Config{PortalMode: portal.ModeNftables, Rules: fake, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("etp", messages.Protocol_TCP, "198.18.0.10", 80)
	sp.ExternalIps = &messages.IPSet{V4: []string{"192.0.2.50"}}
	sp.ExternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	eps := endpoints(addrs...)
	eps[0].Local = true
	eps[1].External = false // on another node: not for external traffic
	p.Submit(snapshot(1, spe(sp, eps)))
	st := w.listening(t, sp.GetKey().ID(), 2, 1)
	if st.GetExternalProxyPort() == 0 || st.GetExternalProxyPort() == st.GetProxyPort() {
		t.Fatalf("want a second proxy port, got %d and %d", st.GetProxyPort(), st.GetExternalProxyPort())
	}
	waitRules(t, fake, func(m rules.Set) bool {
		var cluster, external bool
		for _, r := range m {
			switch r.IP.String() {
			case "198.18.0.10":
				cluster = r.ProxyPort == int(st.GetProxyPort()) && !r.Reject
			case "192.0.2.50":
				external = r.ProxyPort == int(st.GetExternalProxyPort()) && !r.Reject
			}
		}
		return cluster && external
	})
	internal := map[string]bool{}
	external := map[string]bool{}
	for range 20 {
		internal[dialName(t, net.JoinHostPort("127.0.0.1", itoa(st.GetProxyPort())))] = true
		external[dialName(t, net.JoinHostPort("127.0.0.1", itoa(st.GetExternalProxyPort())))] = true
	}
	if len(internal) != 2 || len(external) != 1 || !external["backend-0"] {
		t.Fatalf("cluster traffic reached %v (want both), external traffic reached %v (want the local backend-0)", internal, external)
	}

	// The local endpoint goes away: external traffic is rejected by the
	// rules, cluster traffic still has an endpoint.
	p.Submit(snapshot(2, spe(sp, eps[1:])))
	waitRules(t, fake, func(m rules.Set) bool {
		var clusterOK, externalRejected bool
		for _, r := range m {
			switch r.IP.String() {
			case "198.18.0.10":
				clusterOK = !r.Reject
			case "192.0.2.50":
				externalRejected = r.Reject
			}
		}
		return clusterOK && externalRejected
	})
	// Deleting the service port removes its rules; a clean stop leaves none.
	p.Submit(snapshot(3))
	waitRules(t, fake, func(m rules.Set) bool { return len(m) == 0 })
}
