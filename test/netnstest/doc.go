// Package netnstest is the network-namespace harness of kproxy's tests:
// throwaway namespaces joined by veth pairs, code run inside a namespace
// from a locked OS thread, echo servers, and request helpers that expect an
// answer, a refusal or nothing.
//
// Two shapes are built from it. A Topology (client, node, backends) is
// where kernel portals run: the nftables and iptables portal tests under
// portal/, and the end-to-end tests of the kproxy binary in test/e2e,
// run their portals in the node. A HostNet is a namespace joined to the
// test process's own: test/kubetest's BackendNet, where backends of
// Kubernetes-source tests listen on addresses the apiserver accepts.
//
// Addresses are documentation and benchmarking ranges only: hosts in
// 192.0.2.0/24, 198.51.100.0/24 and 2001:db8::/32, service IPs in
// 198.18.0.0/15 and 2001:db8:5::/64. Every namespace, veth, lock and server
// is removed in t.Cleanup. Tests skip (with the reason) when not root,
// without iproute2, or when the kernel or sandbox refuses network
// namespaces.
//
// The harness is Linux only; on other systems the package is empty.
package netnstest
