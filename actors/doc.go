// Package actors is kproxy's supervision tree: thin adapters that own state
// and lifetimes and turn protobuf messages (package messages) into calls on
// the plain-Go types of balancer/, portal/ and watcher/.
//
//	kproxy (supervisor.go)           one-for-one: restarts a failed child alone
//	 ├─ rules                         kernel portal rules, one transaction per batch (kernel modes only)
//	 ├─ proxier                       the set of service ports: a record and a ServicePort each
//	 │   └─ ServicePort "ns_name:port_P-N"  one-for-one over its children
//	 │       ├─ affinity              ClientIP lookups, TTL sweep (ClientIP only)
//	 │       ├─ balancer              endpoints, round-robin per traffic scope, outliers
//	 │       └─ portal                serves the listeners; their goroutines report failures as messages
//	 └─ watcher                       source events -> watcher.Tracker -> per-service-port changes
//
// No actor owns what must outlive it: a service port's sockets, proxy
// ports, children's configuration, Snapshot and affinity table belong to
// its record (record.go), which lives as long as the service port is
// desired; the top actors' lasting state is a plain struct their Props
// carry, and a service port's actors get its record from theirs
// (Config.spawnProps): every incarnation holds it from its construction
// (docs/architecture.md).
//
// Each actor's file holds its Receive; system.go starts and stops the tree,
// crash.go makes one actor panic (Crash, CrashTop: the primitive fault
// injection and the supervision tests build on). Subpackages: supervision
// (the restart strategy every actor here is supervised by), actorlog
// (protoactor's log into zerolog), faults (fault injection: storms,
// endpoint, rules and listener faults, their counts), metrics (the
// Prometheus registry the actors update) and remote (a core and its
// backends over protoactor remoting, a source of this tree like informers
// or a file).
package actors
