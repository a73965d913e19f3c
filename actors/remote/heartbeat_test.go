package remote

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// TestBackendTakesCoresHeartbeat: a core with a long heartbeat (thousands
// of nodes) tells its backends in their snapshot; a backend whose own
// interval is much shorter does not count that core lost between two of
// its heartbeats (it would re-subscribe, a snapshot each time).
func TestBackendTakesCoresHeartbeat(t *testing.T) {
	if raceEnabled {
		t.Skip("each remoting sets gRPC's global logger, which -race reports; make test runs this without -race")
	}
	views := &feedViews{store: watcher.NewStore()}
	views.store.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{webPort(0)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const coreHeartbeat = time.Second
	core, err := StartCore(ctx, CoreConfig{Views: views, Heartbeat: coreHeartbeat, Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Stop()
	src := NewSource(SourceConfig{Core: core.Address(), NodeName: "node-a", Heartbeat: 20 * time.Millisecond,
		Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
	if err := src.Start(ctx, func(watcher.Event) {}); err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	// Await the backend's answer to the core's first heartbeat: its own
	// interval passes 50 times before it, and 3 of them made it probe the
	// core, 10 lose it and subscribe again.
	deadline := time.Now().Add(5 * coreHeartbeat)
	for answered := false; !answered; {
		st, err := core.Stats(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range st.GetSubscriptions() {
			answered = answered || sub.GetLastAckUnixNano()-sub.GetSubscribedUnixNano() >= int64(coreHeartbeat)
		}
		if !answered && time.Now().After(deadline) {
			t.Fatalf("no subscription answered a heartbeat within %v; the core sent %d snapshots", 5*coreHeartbeat, core.Counters().Snapshots.Load())
		}
		time.Sleep(20 * time.Millisecond) // polls the core's state; the wait is for the heartbeat
	}
	if n := core.Counters().Snapshots.Load(); n != 1 {
		t.Fatalf("the core sent %d snapshots, want 1: the backend re-subscribed between the core's heartbeats", n)
	}
	if n := core.Counters().Dropped.Load(); n != 0 {
		t.Fatalf("the core dropped %d subscriptions, want none", n)
	}
}
