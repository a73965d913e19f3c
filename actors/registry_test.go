package actors

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
)

// Why registry.go overrides cmap.SHARD_COUNT: with the library's 32
// shards, protoactor's registry costs far more per actor than with one.
// Each count is measured in a process of its own, set before its actor
// system exists (the count cannot change under live maps).
func TestRegistryShardCountCostsMemory(t *testing.T) {
	perActor := func(shards int) float64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRegistryShardsHelper$")
		cmd.Env = append(os.Environ(), "KPROXY_TEST_REGISTRY_SHARDS="+strconv.Itoa(shards))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper with %d shards: %v\n%s", shards, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "bytes/actor "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		t.Fatalf("helper with %d shards printed no figure:\n%s", shards, out)
		return 0
	}
	one, def := perActor(1), perActor(32)
	t.Logf("heap per registered actor: %.0f B with 1 shard, %.0f B with cmap's default 32", one, def)
	if def < one+64 {
		t.Errorf("32 shards cost %.0f B per actor, 1 shard %.0f B: the override no longer pays", def, one)
	}
}

// TestRegistryShardsHelper registers actors in a registry of
// $KPROXY_TEST_REGISTRY_SHARDS shards and prints the heap they cost.
func TestRegistryShardsHelper(t *testing.T) {
	shards, err := strconv.Atoi(os.Getenv("KPROXY_TEST_REGISTRY_SHARDS"))
	if err != nil {
		t.Skip("run by TestRegistryShardCountCostsMemory")
	}
	cmap.SHARD_COUNT = shards
	const n = 20000
	sys := actor.NewActorSystem()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	proc := &actor.ActorProcess{} // one for all: the registry's cost alone
	before := heap()
	for i := range n {
		sys.ProcessRegistry.Add(proc, "a"+strconv.Itoa(i))
	}
	after := heap()
	runtime.KeepAlive(sys)
	fmt.Printf("bytes/actor %.1f\n", float64(after-before)/n)
}
