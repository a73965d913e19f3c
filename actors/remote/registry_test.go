package remote

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TestShrinkRegistryKeepsWhatItHeld: the smaller registry holds what the
// first one did (the event stream's process), and actors spawned after
// it are found, answer and leave it when stopped.
func TestShrinkRegistryKeepsWhatItHeld(t *testing.T) {
	system := actor.NewActorSystem()
	count := func() (n int) {
		for _, shard := range system.ProcessRegistry.LocalPIDs.LocalPIDs {
			n += shard.Count()
		}
		return n
	}
	before := count()
	shrinkRegistry(system)
	if n := len(system.ProcessRegistry.LocalPIDs.LocalPIDs); n != registryShards {
		t.Fatalf("%d shards, want %d", n, registryShards)
	}
	if after := count(); after != before || before == 0 {
		t.Fatalf("%d processes before and %d after, want the same (and some)", before, after)
	}
	if _, ok := system.ProcessRegistry.GetLocal("eventstream"); !ok {
		t.Fatal("the event stream's process is gone")
	}
	var pids []*actor.PID
	for i := range 100 {
		pid, err := system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
			if s, ok := ctx.Message().(string); ok {
				ctx.Respond("re: " + s)
			}
		}), fmt.Sprintf("a-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	for i, pid := range pids {
		r, err := system.Root.RequestFuture(pid, fmt.Sprint(i), 5*time.Second).Result()
		if err != nil || r != fmt.Sprintf("re: %d", i) {
			t.Fatalf("actor %d answered %v, %v", i, r, err)
		}
	}
	for _, pid := range pids {
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(); after != before {
		t.Fatalf("%d processes after the actors stopped, want %d", after, before)
	}
}
