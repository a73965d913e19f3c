// Package remote splits kproxy into a core and its backends (KPNG's
// to-api split) over protoactor-go's own remoting, gRPC underneath:
//
//   - core.go: the core (kproxy watch --serve), one source watched once and
//     each subscribed backend served its node's view, as a Snapshot and
//     then Deltas, with heartbeats, a lease, and a Snapshot instead of a
//     backlog for a backend that falls behind;
//   - source.go: a backend's Source (--source remote:ADDR), a watcher.Store
//     kept equal to the core's view of its node, the node proxy's source
//     as informers or a file would be; its subscriber actor re-subscribes
//     when the core goes silent, skips a message or restarts;
//   - remoting.go: an actor system with remoting on its own address, the
//     shared token, TLS, and the node a client certificate names.
//
// The messages are in package messages (remote.proto). Nothing here needs the
// node proxy's tree (package actors) or its data path.
package remote
