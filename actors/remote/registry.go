package remote

import (
	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
)

// registryShards is how many shards a remoting actor system's process
// registry has. protoactor makes 1,024, each a concurrent map of 32 more:
// 2.8 MB per actor system, which a backend (a handful of actors) pays as
// much as a node proxy of thousands, and a host of hollow nodes once per
// node. A core's registry holds one grain per node it serves: 16 shards
// of 32 maps keep that at a few entries per map at thousands of nodes.
const registryShards = 16

// shrinkRegistry gives system a registry of registryShards shards holding
// what the first one held (its dead-letter and event-stream processes).
// It must run before anything else uses the system: nothing else runs
// yet when NewActorSystem returns.
func shrinkRegistry(system *actor.ActorSystem) {
	sm := &actor.SliceMap{LocalPIDs: make([]cmap.ConcurrentMap, registryShards)}
	for i := range sm.LocalPIDs {
		sm.LocalPIDs[i] = cmap.New()
	}
	for _, shard := range system.ProcessRegistry.LocalPIDs.LocalPIDs {
		for id, p := range shard.Items() {
			sm.GetBucket(id).Set(id, p)
		}
	}
	system.ProcessRegistry.LocalPIDs = sm
}
