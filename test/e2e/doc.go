// Package e2e holds the end-to-end tests of the kproxy binary with kernel
// portals, in network namespaces (test/netnstest); it has no code of its
// own outside the tests:
//
//	client (192.0.2.1, 2001:db8::1) --kc0/kn0-- node (192.0.2.2, 2001:db8::2) --kn1/kb0-- backend
//	                                            runs kproxy                            198.51.100.2-3
//	                                                                                   2001:db8:1::2-3
//
// The client routes the service ranges (198.18.0.0/15, 2001:db8:5::/64) via
// the node. The backend runs real TCP and UDP servers (test/backends) that
// say who they are. The tests build the kproxy binary into a temporary
// directory and run it in the node as a separate process (ip netns exec),
// with its admin API on the node's loopback; readiness is polled there,
// never slept for.
//
// TestE2ENetns runs kproxy with the nftables and with the iptables portal,
// in parallel, each in a topology of its own; nftables_test.go and
// iptables_test.go give each mode's subtests in order. The topics: what
// reaches a backend and what is refused, over both families
// (matrix_test.go), node ports with and without --nodeport-addresses
// (nodeports_test.go), portal crashes (crash_test.go), a deleted service
// (delete_test.go), and whether the rules outlive kproxy on SIGTERM,
// SIGKILL, restart and kproxy cleanup (lifecycle_test.go); health-check
// node ports and /healthz across a hand-over (healthhandover_test.go);
// what --portal auto takes, and its failed start where no kernel portal
// works (autoportal_test.go). The traffic policies (policy_test.go) are
// checked for each mode as kube-proxy answers them: drop versus reject,
// the short-circuit of the node's and the pods' traffic (the backends
// stand in for pods), loadBalancerSourceRanges and the service-CIDR
// catch-all. Impolite peers: an endpoint whose 5-deep accept queue drops
// SYNs resets no client (acceptqueue_test.go), and the node's own
// connections in a narrow ephemeral range take no proxy port
// (ephemeralports_test.go). The client's address at the endpoint: PROXY
// protocol headers (proxyprotocol_test.go) and transparent proxying of
// node-local endpoints, TCP and UDP, with the cleanup of its marks and
// policy routing (transparent_test.go); what each costs per connection
// beside the plain path is measured by kproxy-bench client-address.
// Core replicas (corereplicas_test.go): two node proxies on --source
// remote: with the nftables portal serve from three core replicas on
// protoactor's cluster, in a namespace of their own; the one serving them
// is killed during churn and under load, and they resync from the others.
//
// The shared setup: the topology, its backends and the requests that expect
// a backend's answer (env_test.go), the services kproxy reads
// (manifest_test.go), kproxy's processes (process_test.go), its admin API
// (admin_test.go) and its kernel rules (rules_test.go); what the
// conformance suite shares with these (building the binary, its process
// and log, GET /state) is in test/binarytest.
package e2e
