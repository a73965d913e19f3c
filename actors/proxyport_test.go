package actors

import (
	"context"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// An exhausted --port-range is not permanent: a service port that got no
// proxy port says so in its state, and serves once a port frees up. (A
// kernel mode: the bind portal has no proxy ports.)
func TestProxyPortRetriedWhenRangeFrees(t *testing.T) {
	base := 20000 + rand.IntN(12000) // below the ephemeral range (32768-)
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake(), BindAddress: "127.0.0.1", Ports: datapath.NewPortAllocator("127.0.0.1", datapath.PortRange{Base: base, Size: 1}),
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.Disabled)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	first := spe(svcPort("first", messages.Protocol_TCP, "127.0.27.1", 18080), endpoints(addrs...))
	second := spe(svcPort("second", messages.Protocol_TCP, "127.0.27.2", 18080), endpoints(addrs...))
	p.Submit(snapshot(1, first))
	var st *messages.ServicePortState
	w.wait(t, "the first service port to listen or fail", func(m map[string]*messages.ServicePortState) bool {
		st = m[first.GetServicePort().GetKey().ID()]
		return len(st.GetListenAddresses()) == 1 || len(st.GetFailures()) > 0
	})
	if st.GetProxyPort() != int32(base) {
		t.Skipf("port %d is busy on this machine: %v", base, st.GetFailures())
	}
	p.Submit(snapshot(2, first, second))
	id := second.GetServicePort().GetKey().ID()
	w.wait(t, "the second service port to report no proxy port", func(m map[string]*messages.ServicePortState) bool {
		st := m[id]
		return st != nil && st.GetProxyPort() == 0 && len(st.GetFailures()) == 1 &&
			st.GetFailures()[0].GetCode() == messages.FailureCode_PROXY_PORT_UNAVAILABLE
	})

	p.Submit(snapshot(3, second)) // first goes: its port frees
	w.wait(t, "the second service port to serve on the freed port", func(m map[string]*messages.ServicePortState) bool {
		st := m[id]
		return st.GetProxyPort() == int32(base) && len(st.GetFailures()) == 0 && len(st.GetListenAddresses()) == 1
	})
	if got := dialName(t, net.JoinHostPort("127.0.0.1", itoa(base))); got != "backend-0" {
		t.Fatalf("second service answered by %q", got)
	}
}
