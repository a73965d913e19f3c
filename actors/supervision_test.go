package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// A listener failure reported by the accept goroutine makes the Portal
// crash; its supervisor restarts it alone, on the same addresses and proxy
// port, and the service port serves again. A stale report from the old
// incarnation is ignored.
func TestPortalRestartKeepsAddresses(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	_, addrs := tcpBackends(t, 2)
	sp := svcPort("restart", messages.Protocol_TCP, "127.0.22.1", 18080)
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	before := w.listening(t, sp.GetKey().ID(), 2, 1)
	dialName(t, "127.0.22.1:18080")

	portalPID := actor.NewPID(p.System.Address(), before.GetActorId()+"/portal")
	oldIncarnation := incarnations.Load()
	p.System.Root.Send(portalPID, &messages.ListenerFailed{Incarnation: oldIncarnation, Address: "127.0.22.1:18080", Error: "injected"})

	var after *messages.ServicePortState
	w.wait(t, "portal restarted and listening", func(m map[string]*messages.ServicePortState) bool {
		after = m[sp.GetKey().ID()]
		return after.GetRestarts() == 1 && incarnations.Load() > oldIncarnation && len(after.GetListenAddresses()) == 2
	})
	if after.GetProxyPort() != before.GetProxyPort() {
		t.Fatalf("proxy port changed across restart: %d -> %d", before.GetProxyPort(), after.GetProxyPort())
	}
	for i, a := range before.GetListenAddresses() {
		if after.GetListenAddresses()[i] != a {
			t.Fatalf("listen addresses changed: %v -> %v", before.GetListenAddresses(), after.GetListenAddresses())
		}
	}
	dialName(t, "127.0.22.1:18080")

	// A late report from the dead incarnation must not crash the new one.
	current := incarnations.Load()
	p.System.Root.Send(portalPID, &messages.ListenerFailed{Incarnation: oldIncarnation, Address: "127.0.22.1:18080", Error: "stale"})
	// Mailbox order: this request is answered after the stale report is handled.
	res, err := p.System.Root.RequestFuture(portalPID, &messages.GetState{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(*messages.ListenerReady); got.GetIncarnation() != current || len(got.GetAddresses()) != 2 {
		t.Fatalf("stale failure disturbed the portal: incarnation %d (want %d), addresses %v", got.GetIncarnation(), current, got.GetAddresses())
	}
	dialName(t, "127.0.22.1:18080")
}
