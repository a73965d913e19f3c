package remote

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// slotHolder takes a replica's one snapshot slot (it subscribes routed,
// so the replica serves it whatever placement says) and acknowledges its
// snapshot only when told (ackNow).
type slotHolder struct {
	core *actor.PID
	node string
	got  chan *messages.Snapshot
	snap *messages.Snapshot
}

type ackNow struct{}

func (h *slotHolder) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(h.core, &messages.Subscribe{NodeName: h.node, Client: "probe", Routed: true})
	case *messages.Snapshot:
		carried(m)
		h.snap = m
		h.got <- m
	case ackNow:
		ctx.Request(h.core, &messages.SubscriptionAck{Session: h.snap.GetSession(), Seq: h.snap.GetSeq()})
	}
}

// TestCoreReplicaLeavingRedirectsQueued: a backend queued at the replica
// that serves its node (its one snapshot slot taken) is told when that
// replica stops, and subscribes through the other at once, naming it,
// rather than after its own heartbeats (an hour here): the other serves
// it as soon as a slot is free.
func TestCoreReplicaLeavingRedirectsQueued(t *testing.T) {
	if raceEnabled {
		t.Skip("each remoting sets gRPC's global logger, which -race reports; make test runs this without -race")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cores := startReplicas(t, ctx, newFeeds(2, 3), healthAddrs(t, 2), func(c *CoreConfig) { c.MaxSnapshotsInFlight = 1 })
	stopped := map[int]bool{}
	defer func() {
		for i, c := range cores {
			if !stopped[i] {
				c.Stop()
			}
		}
	}()
	waitMembers(t, cores, 2)
	holders := make([]*actor.PID, len(cores))
	for i, c := range cores {
		got := make(chan *messages.Snapshot, 1)
		h := &slotHolder{core: actor.NewPID(c.Address(), CoreActorName), node: "holder-" + string(rune('a'+i)), got: got}
		holders[i] = c.rs.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return h }))
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("replica %d sent its slot holder no snapshot", i)
		}
	}

	src := NewSource(SourceConfig{Core: cores[0].Address() + "," + cores[1].Address(), NodeName: "node-q", Heartbeat: time.Hour,
		Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
	defer src.Stop()
	started := make(chan error, 1)
	go func() { started <- src.Start(ctx, func(watcher.Event) {}) }()
	serving := -1
	for deadline := time.Now().Add(10 * time.Second); serving < 0; {
		for i, c := range cores {
			if c.Counters().Queued.Load() == 1 {
				serving = i
			}
		}
		if serving < 0 && time.Now().After(deadline) {
			t.Fatal("the backend was queued at no replica")
		}
		time.Sleep(10 * time.Millisecond) // polls the replicas' gauges
	}
	other := 1 - serving
	cores[serving].Stop()
	stopped[serving] = true
	cores[other].rs.system.Root.Send(holders[other], ackNow{})
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the backend queued at replica %d, which left, was not served by replica %d within 10 s", serving, other)
	}
	if by := servedBy(t, cores[other:other+1], nil); len(by) != 2 {
		t.Fatalf("replica %d serves %v, want its slot holder and node-q", other, by)
	}
}
