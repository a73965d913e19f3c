package actors

import cmap "github.com/orcaman/concurrent-map"

// protoactor's process registry spreads actors over 1,024 concurrent maps
// of cmap.SHARD_COUNT shards each: 32,768 Go maps with the default 32
// shards, most holding one or two actors, so nearly every actor spawned
// would allocate a map group of its own, besides the empty maps. One shard
// per concurrent map keeps the 1,024 locks protoactor hashes actors over
// and fills the maps' groups.
// The count is read when a map is made and on every access, so it is set
// here, before any actor system exists, and never changed.
func init() { cmap.SHARD_COUNT = 1 }
