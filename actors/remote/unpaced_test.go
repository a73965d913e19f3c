package remote

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// coreWithProbe starts a core actor over store with cfg and one
// subscribed probe whose Snapshot is acknowledged.
func coreWithProbe(t *testing.T, store *watcher.Store, cfg *CoreConfig) (system *actor.ActorSystem, core *actor.PID, p *probe, ack func(*messages.Delta)) {
	t.Helper()
	cfg.defaults()
	system = actor.NewActorSystem()
	core, _ = system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newCoreActor(cfg) }), "core")
	t.Cleanup(func() { system.Root.Stop(core) })
	system.Root.Send(core, &messages.SourceSynced{})
	p = &probe{core: core, node: "node-a", got: make(chan proto.Message, 1000)}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	snap := next(t, p.got).(*messages.Snapshot)
	system.Root.RequestWithCustomSender(core, &messages.SubscriptionAck{Session: snap.GetSession(), Seq: snap.GetSeq()}, pid)
	return system, core, p, func(d *messages.Delta) {
		system.Root.RequestWithCustomSender(core, &messages.SubscriptionAck{Session: d.GetSession(), Seq: d.GetSeq()}, pid)
	}
}

// coreStats is a barrier too: the core has handled what was sent before.
func coreStats(t *testing.T, system *actor.ActorSystem, core *actor.PID) *messages.CoreStats {
	t.Helper()
	r, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return r.(*messages.CoreStats)
}

func servicePort(name string, ip string) *messages.ServicePortEndpoints {
	return &messages.ServicePortEndpoints{ServicePort: &messages.ServicePort{Key: &messages.ServicePortKey{Namespace: "default",
		Name: name, PortName: "http", Protocol: messages.Protocol_TCP}, Port: 80},
		Endpoints: []*messages.Endpoint{{Ips: []string{ip}, Port: 8080, Ready: true}}}
}

// TestCoreSendsEndpointChangesAtOnce: with the core's --min-sync-period an
// hour, new services take the burst's two tokens and a third waits for
// the period, while an endpoint change of an existing service port is
// sent at once, alone.
func TestCoreSendsEndpointChangesAtOnce(t *testing.T) {
	store := watcher.NewStore()
	state := []*messages.ServicePortEndpoints{webPort(0)}
	store.Replace(state, nil, false)
	system, core, p, ack := coreWithProbe(t, store, &CoreConfig{Views: storeViews{store}, MinSyncPeriod: time.Hour,
		Heartbeat: time.Hour, Lease: time.Hour, Log: zerolog.Nop()})
	change := func(svc string, ports ...*messages.ServicePortEndpoints) {
		state = append(state, ports...)
		store.Replace(state, nil, false)
		system.Root.Send(core, &watcher.Event{Service: "default/" + svc})
	}
	for _, name := range []string{"new-1", "new-2"} {
		change(name, servicePort(name, "192.0.2.1"))
		d := next(t, p.got).(*messages.Delta)
		if len(d.GetUpserts()) != 1 || d.GetUpserts()[0].GetServicePort().GetKey().GetName() != name {
			t.Fatalf("new service %s within the burst: delta %v", name, d)
		}
		ack(d)
	}
	change("new-3", servicePort("new-3", "192.0.2.1"))
	state[0] = webPort(1)
	change("web")
	d := next(t, p.got).(*messages.Delta)
	if len(d.GetUpserts()) != 1 || !proto.Equal(d.GetUpserts()[0], webPort(1)) || len(d.GetDeletes()) != 0 {
		t.Fatalf("web's endpoint change after a third new service: delta %v, want web's new endpoint alone (new-3 waits for the period)", d)
	}
	coreStats(t, system, core)
	if n := len(p.got); n != 0 {
		t.Fatalf("%d more messages: the third new service was not paced", n)
	}
}

// TestCoreUnpacedDeltasFollowAcknowledgements: endpoint changes need no
// pacing, but a backend that has half its MaxInFlight unacknowledged gets
// no more of them until it acknowledges; then it gets one Delta with the
// latest state, never falling behind into a full Snapshot.
func TestCoreUnpacedDeltasFollowAcknowledgements(t *testing.T) {
	store := watcher.NewStore()
	store.Replace([]*messages.ServicePortEndpoints{webPort(0)}, nil, false)
	system, core, p, ack := coreWithProbe(t, store, &CoreConfig{Views: storeViews{store}, MinSyncPeriod: time.Hour, MaxInFlight: 4,
		Heartbeat: time.Hour, Lease: time.Hour, Log: zerolog.Nop()})
	var sent []*messages.Delta
	for v := 1; v <= 10; v++ {
		store.Replace([]*messages.ServicePortEndpoints{webPort(v)}, nil, false)
		system.Root.Send(core, &watcher.Event{Service: "default/web"})
		coreStats(t, system, core)
		if v <= 2 {
			sent = append(sent, next(t, p.got).(*messages.Delta))
		}
	}
	if n := len(p.got); n != 0 {
		t.Fatalf("%d deltas beyond half of MaxInFlight=4 unacknowledged", n)
	}
	ack(sent[1])
	d := next(t, p.got).(*messages.Delta)
	if len(d.GetUpserts()) != 1 || !proto.Equal(d.GetUpserts()[0], webPort(10)) {
		t.Fatalf("after the acknowledgement: %v, want one delta with the latest endpoint", d)
	}
	st := coreStats(t, system, core).GetSubscriptions()[0]
	if st.GetBehind() || st.GetSnapshots() != 1 || st.GetDeltas() != 3 {
		t.Fatalf("stats %v: want 3 deltas, never behind, no second snapshot", st)
	}
}
