// Command kproxy-bench is kproxy's benchmark harness, a binary of its own
// so the node agent links none of it: it runs the kproxy binary under test
// (by default the kproxy next to it) as a separate process on loopback,
// against direct connections, HAProxy, a bare UDP relay and an earlier
// kproxy build in the same run. Its hollow scenario instead measures a
// core in its own process serving hollow nodes, which its children
// (kproxy-bench hollow-host) run.
//
//	kproxy-bench startup|ports|churn|chaos|client-address|all [flags]
//	kproxy-bench ports --baseline-kproxy /tmp/kproxy-main
//	kproxy-bench hollow --hollow-nodes 100,1000
//	kproxy-bench version
package main
