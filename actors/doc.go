// Package actors is kproxy's supervision tree: thin adapters that own state
// and lifetimes and turn protobuf messages (package messages) into calls on
// the plain-Go types of balancer/, portal/ and watcher/.
//
//	root
//	 ├─ watcher                       source events -> watcher.Tracker -> per-service-port changes
//	 ├─ rules                         kernel portal rules, one transaction per batch (kernel modes only)
//	 └─ proxier (one-for-one)         owns the set of service ports
//	     └─ ServicePort "ns/name:port/P"  one-for-one; restarts a child alone
//	         ├─ balancer              endpoints, round-robin per traffic scope
//	         ├─ affinity              clientIP -> endpoint, TTL sweep (ClientIP only)
//	         └─ portal                listeners; accept/read goroutines report failures as messages
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
