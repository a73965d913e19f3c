package remote

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// storeViews serves one Store as every node's view (the core's transport
// and bookkeeping are what is tested here).
type storeViews struct{ *watcher.Store }

func (storeViews) Start(context.Context, func(watcher.Event)) error { return nil }
func (storeViews) Stop()                                            {}
func (v storeViews) ViewFor(string) watcher.View                    { return v.Store }

// probe is a backend stand-in: it subscribes and hands every message from
// the core to the test, which acknowledges when it chooses.
type probe struct {
	core *actor.PID
	node string
	got  chan proto.Message
	// asked, when set, is closed once the Subscribe is sent.
	asked chan struct{}
	// endpointUpdates and updateTriggers are what the probe says it reads
	// (Subscribe's fields).
	endpointUpdates, updateTriggers bool
}

func (p *probe) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(p.core, &messages.Subscribe{NodeName: p.node, Client: "probe",
			EndpointUpdates: p.endpointUpdates, UpdateTriggers: p.updateTriggers})
		if p.asked != nil {
			close(p.asked)
		}
	case *messages.Snapshot, *messages.Delta, *messages.Heartbeat:
		carried(m.(proto.Message)) // local: no trip through the wire decodes the pre-encoded fields
		p.got <- m.(proto.Message)
	}
}

func next(t *testing.T, ch chan proto.Message) proto.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message from the core")
		return nil
	}
}

func webPort(version int) *messages.ServicePortEndpoints {
	return &messages.ServicePortEndpoints{ServicePort: &messages.ServicePort{Key: &messages.ServicePortKey{Namespace: "default",
		Name: "web", PortName: "http", Protocol: messages.Protocol_TCP}, Port: 80},
		Endpoints: []*messages.Endpoint{{Ips: []string{fmt.Sprintf("10.0.%d.%d", version/250, version%250+1)}, Port: 8080, Ready: true}}}
}

// startCoreActor spawns a core actor over one web service port with cfg
// (Views and Log filled in, defaults applied), synced unless told not to;
// it stops with the test. The store is what the core serves.
func startCoreActor(t *testing.T, cfg *CoreConfig, synced bool) (*actor.ActorSystem, *actor.PID, *watcher.Store) {
	t.Helper()
	store := watcher.NewStore()
	store.Replace([]*messages.ServicePortEndpoints{webPort(0)}, nil, false)
	cfg.Views, cfg.Log = storeViews{store}, zerolog.Nop()
	cfg.defaults()
	system := actor.NewActorSystem()
	core, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newCoreActor(cfg) }), "core")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { system.Root.Stop(core) })
	if synced {
		system.Root.Send(core, &messages.SourceSynced{})
	}
	return system, core, store
}

// TestCoreSlowBackendCatchesUpNotBacklog: a backend that stops
// acknowledging gets at most MaxInFlight Deltas, then nothing while 100
// changes go by (no backlog), and one Delta from what it holds to the
// latest state once it has acknowledged what it got (not a Snapshot of
// every service); a fast backend beside it gets every change as it
// happens.
func TestCoreSlowBackendCatchesUpNotBacklog(t *testing.T) {
	cfg := &CoreConfig{MaxInFlight: 4, Heartbeat: time.Hour, Lease: time.Hour}
	system, core, store := startCoreActor(t, cfg, true)

	fast := &probe{core: core, node: "fast", got: make(chan proto.Message, 1000)}
	slow := &probe{core: core, node: "slow", got: make(chan proto.Message, 1000)}
	fastPID := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return fast }))
	slowPID := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return slow }))
	ack := func(pid *actor.PID, session string, seq uint64) {
		system.Root.RequestWithCustomSender(core, &messages.SubscriptionAck{Session: session, Seq: seq}, pid)
	}
	fs := next(t, fast.got).(*messages.Snapshot)
	ss := next(t, slow.got).(*messages.Snapshot)
	ack(fastPID, fs.GetSession(), fs.GetSeq())
	ack(slowPID, ss.GetSession(), ss.GetSeq())

	const changes = 100
	for v := 1; v <= changes; v++ {
		store.Replace([]*messages.ServicePortEndpoints{webPort(v)}, nil, false)
		system.Root.Send(core, &watcher.Event{Service: "default/web"})
		system.Root.Send(core, &messages.FlushChanges{})
		d := next(t, fast.got).(*messages.Delta)
		if d.GetSeq() != fs.GetSeq()+uint64(v) || !proto.Equal(d.GetUpserts()[0], webPort(v)) {
			t.Fatalf("fast backend: delta %d is %v", v, d)
		}
		ack(fastPID, d.GetSession(), d.GetSeq())
	}
	// The fast one has everything, so the core has flushed all 100: the
	// slow one got MaxInFlight deltas and nothing after them.
	var deltas []*messages.Delta
	for range cfg.MaxInFlight {
		deltas = append(deltas, next(t, slow.got).(*messages.Delta))
	}
	if n := len(slow.got); n != 0 {
		t.Fatalf("slow backend got %d more messages beyond MaxInFlight=%d: a backlog", n, cfg.MaxInFlight)
	}
	// What the core's page shows: the slow one behind since its first
	// unacknowledged delta, the fast one in sync.
	stats := func() map[string]*messages.SubscriptionStats {
		t.Helper()
		r, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]*messages.SubscriptionStats{}
		for _, s := range r.(*messages.CoreStats).GetSubscriptions() {
			by[s.GetNodeName()] = s
		}
		return by
	}
	st := stats()
	if s := st["slow"]; !s.GetBehind() || s.GetDeltas() != int64(cfg.MaxInFlight) || s.GetSnapshots() != 1 || s.GetSeq()-s.GetAcked() != uint64(cfg.MaxInFlight) ||
		s.GetUnackedSinceUnixNano() == 0 || s.GetClient() != "probe" {
		t.Errorf("slow backend's stats %v: want behind, %d deltas unacknowledged since a time, 1 snapshot", s, cfg.MaxInFlight)
	}
	if s := st["fast"]; s.GetBehind() || s.GetDeltas() != changes || s.GetSnapshots() != 1 || s.GetSeq() != s.GetAcked() || s.GetUnackedSinceUnixNano() != 0 {
		t.Errorf("fast backend's stats %v: want %d deltas, all acknowledged, no lag", s, changes)
	}
	last := deltas[len(deltas)-1]
	ack(slowPID, last.GetSession(), last.GetSeq())
	caught, ok := next(t, slow.got).(*messages.Delta)
	if !ok {
		t.Fatal("slow backend: after catching up, want a Delta")
	}
	if caught.GetSeq() != last.GetSeq()+1 || len(caught.GetUpserts()) != 1 || !proto.Equal(caught.GetUpserts()[0], webPort(changes)) {
		t.Fatalf("slow backend's catch-up %v, want seq %d and the latest state", caught, last.GetSeq()+1)
	}
	r, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if st := r.(*messages.CoreStats); st.GetResyncs() != 1 || len(st.GetSubscriptions()) != 2 {
		t.Fatalf("core stats %v, want 1 resync and 2 subscriptions", st)
	}
}

// TestCoreServesSubscribesThatCameBeforeSync: a Subscribe that reaches
// the core before its source is complete is answered once it is, without
// the backend asking again (each ask would be one more snapshot to send).
func TestCoreServesSubscribesThatCameBeforeSync(t *testing.T) {
	system, core, _ := startCoreActor(t, &CoreConfig{Heartbeat: time.Hour, Lease: time.Hour}, false)
	p := &probe{core: core, node: "early", got: make(chan proto.Message, 10), asked: make(chan struct{})}
	system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	<-p.asked // the Subscribe is in the core's mailbox before what follows
	st, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.(*messages.CoreStats).GetSubscriptions()); n != 0 {
		t.Fatalf("%d subscriptions before the source synced, want none", n)
	}
	system.Root.Send(core, &messages.SourceSynced{})
	snap, ok := next(t, p.got).(*messages.Snapshot)
	if !ok || len(snap.GetServicePorts()) != 1 {
		t.Fatalf("after the sync: %v, want a Snapshot of the one service port", snap)
	}
}

// TestCoreQueuesSubscribesBeyondMaxSnapshots: with MaxSnapshotsInFlight
// snapshots unacknowledged, further Subscribes wait in turn (a core
// starting with thousands of nodes subscribing would otherwise send every
// snapshot at once, none acknowledged within the lease); each
// acknowledgement lets one more through, and a queued backend asking
// again is not served twice.
func TestCoreQueuesSubscribesBeyondMaxSnapshots(t *testing.T) {
	cfg := &CoreConfig{MaxSnapshotsInFlight: 2, Heartbeat: time.Hour, Lease: time.Hour}
	system, core, _ := startCoreActor(t, cfg, true)

	got := make(chan proto.Message, 100)
	pids := map[string]*actor.PID{}
	for i := range 5 {
		p := &probe{core: core, node: fmt.Sprintf("node-%d", i), got: got, asked: make(chan struct{})}
		pids[p.node] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
		<-p.asked
	}
	subscriptions := func() int {
		t.Helper()
		r, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(r.(*messages.CoreStats).GetSubscriptions())
	}
	if n, q := subscriptions(), cfg.counters.Queued.Load(); n != 2 || q != 3 {
		t.Fatalf("%d subscriptions served and %d queued, want 2 and 3", n, q)
	}
	served := map[string]*messages.Snapshot{}
	for range 2 {
		s := next(t, got).(*messages.Snapshot)
		served[s.GetNodeName()] = s
	}
	// A queued backend asks again: still one place, no snapshot yet.
	var queued string
	for node := range pids {
		if served[node] == nil {
			queued = node
			break
		}
	}
	system.Root.RequestWithCustomSender(core, &messages.Subscribe{NodeName: queued, Client: "probe"}, pids[queued])
	if n, q := subscriptions(), cfg.counters.Queued.Load(); n != 2 || q != 3 || len(got) != 0 {
		t.Fatalf("after a queued backend asked again: %d served, %d queued, %d messages; want 2, 3, 0", n, q, len(got))
	}
	// Each acknowledged snapshot lets the next one go.
	for want := 3; want <= 5; want++ {
		var acked *messages.Snapshot
		for _, s := range served {
			acked = s
			break
		}
		delete(served, acked.GetNodeName())
		system.Root.RequestWithCustomSender(core, &messages.SubscriptionAck{Session: acked.GetSession(), Seq: acked.GetSeq()}, pids[acked.GetNodeName()])
		s := next(t, got).(*messages.Snapshot)
		if _, dup := served[s.GetNodeName()]; dup {
			t.Fatalf("%s got a second snapshot", s.GetNodeName())
		}
		served[s.GetNodeName()] = s
		if n := subscriptions(); n != want {
			t.Fatalf("after %d acknowledgements %d subscriptions, want %d", want-2, n, want)
		}
	}
	if q := cfg.counters.Queued.Load(); q != 0 || len(got) != 0 {
		t.Fatalf("%d still queued and %d more messages, want none", q, len(got))
	}
}

// TestCoreDeadBackendFreesItsSnapshotSlot: a backend that never
// acknowledges its snapshot (gone right after subscribing) holds its slot
// only until its lease runs out; the one queued behind it is served then.
func TestCoreDeadBackendFreesItsSnapshotSlot(t *testing.T) {
	// Every tick finds the first backend's lease run out.
	cfg := &CoreConfig{MaxSnapshotsInFlight: 1, Heartbeat: time.Hour, Lease: time.Nanosecond}
	system, core, _ := startCoreActor(t, cfg, true)
	got := make(chan proto.Message, 10)
	for _, node := range []string{"dead", "queued"} {
		p := &probe{core: core, node: node, got: got, asked: make(chan struct{})}
		system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
		<-p.asked
	}
	// Both Subscribes are in the core's mailbox: its answer to a question
	// asked now comes after it handled them.
	if _, err := system.Root.RequestFuture(core, &messages.GetCoreStats{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	first := next(t, got).(*messages.Snapshot)
	if first.GetNodeName() != "dead" || cfg.counters.Queued.Load() != 1 {
		t.Fatalf("first snapshot for %s with %d queued, want dead's and 1 queued", first.GetNodeName(), cfg.counters.Queued.Load())
	}
	system.Root.Send(core, &messages.CoreTick{})
	if s := next(t, got).(*messages.Snapshot); s.GetNodeName() != "queued" {
		t.Fatalf("after the lease: a snapshot for %s, want the queued backend's", s.GetNodeName())
	}
	if d := cfg.counters.Dropped.Load(); d != 1 {
		t.Fatalf("%d subscriptions dropped, want the dead backend's", d)
	}
}

// TestCoreSendsEndpointUpdatesToBackendsThatReadThem: an endpoints-only
// change reaches a backend as an EndpointsUpdate carrying its trigger time
// only if it reads both (Subscribe's endpoint_updates and
// update_triggers); an older backend gets the whole upsert with the
// trigger time in the Delta's map, which is all it reads.
func TestCoreSendsEndpointUpdatesToBackendsThatReadThem(t *testing.T) {
	cfg := &CoreConfig{Heartbeat: time.Hour, Lease: time.Hour}
	system, core, store := startCoreActor(t, cfg, true)
	probes := map[string]*probe{
		"oldest": {},
		"older":  {endpointUpdates: true},
		"new":    {endpointUpdates: true, updateTriggers: true},
	}
	for node, p := range probes {
		p.core, p.node, p.got = core, node, make(chan proto.Message, 10)
		pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
		s := next(t, p.got).(*messages.Snapshot)
		system.Root.RequestWithCustomSender(core, &messages.SubscriptionAck{Session: s.GetSession(), Seq: s.GetSeq()}, pid)
	}
	const at = int64(1_700_000_000_000_000_000)
	if _, err := store.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{webPort(1)},
		TriggerUnixNano: map[string]int64{"default/web": at}}); err != nil {
		t.Fatal(err)
	}
	system.Root.Send(core, &watcher.Event{Service: "default/web"})
	system.Root.Send(core, &messages.FlushChanges{})
	for node, p := range probes {
		d := next(t, p.got).(*messages.Delta)
		want := &messages.Delta{Upserts: []*messages.ServicePortEndpoints{webPort(1)}, TriggerUnixNano: map[string]int64{"default/web": at}}
		if node == "new" {
			want = &messages.Delta{EndpointUpdates: []*messages.EndpointsUpdate{{Key: webPort(1).GetServicePort().GetKey(),
				Endpoints: webPort(1).GetEndpoints(), TriggerUnixNano: at}}}
		}
		d.Session, d.Seq, d.SentUnixNano = "", 0, 0
		if !proto.Equal(d, want) {
			t.Errorf("backend %s got %v\nwant %v", node, d, want)
		}
	}
}
