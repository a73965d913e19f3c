package actors

import (
	"context"
	"net"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// ClientIP affinity is per traffic scope: a client pinned through the
// cluster IP to a remote endpoint is not sent there through the external
// proxy port, which externalTrafficPolicy Local limits to local endpoints.
func TestAffinityIsPerTrafficScope(t *testing.T) {
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake(), BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("sticky-etp", messages.Protocol_TCP, "198.18.0.11", 80)
	sp.ExternalIps = &messages.IPSet{V4: []string{"192.0.2.51"}}
	sp.ExternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP

	// First only the remote backend-1 serves cluster traffic: the client
	// gets pinned to it there.
	eps := endpoints(addrs...)
	eps[0].Local, eps[0].Internal = true, false
	eps[1].External = false
	p.Submit(snapshot(1, spe(sp, eps)))
	st := w.listening(t, sp.GetKey().ID(), 2, 1)
	internal := net.JoinHostPort("127.0.0.1", itoa(st.GetProxyPort()))
	external := net.JoinHostPort("127.0.0.1", itoa(st.GetExternalProxyPort()))
	if got := dialName(t, internal); got != "backend-1" {
		t.Fatalf("cluster traffic reached %s, want backend-1", got)
	}

	// Both serve cluster traffic now; the pin holds there, and external
	// traffic goes only to the local backend-0.
	eps = endpoints(addrs...)
	eps[0].Local = true
	eps[1].External = false
	p.Submit(snapshot(2, spe(sp, eps)))
	w.listening(t, sp.GetKey().ID(), 2, 2)
	for range 5 {
		if got := dialName(t, internal); got != "backend-1" {
			t.Fatalf("cluster traffic reached %s, want the pinned backend-1", got)
		}
		if got := dialName(t, external); got != "backend-0" {
			t.Fatalf("external traffic reached %s, want only the local backend-0", got)
		}
	}
}
