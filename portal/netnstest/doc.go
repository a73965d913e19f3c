// Package netnstest is a network-namespace harness for tests of kernel
// portals and of the kproxy binary: throwaway namespaces joined by veth
// pairs, code run inside a namespace from a locked OS thread, echo servers,
// and request helpers that expect an answer, a refusal or nothing.
//
// Addresses are documentation and benchmarking ranges only: hosts in
// 192.0.2.0/24, 198.51.100.0/24 and 2001:db8::/32, service IPs in
// 198.18.0.0/15 and 2001:db8:5::/64. Every namespace, veth and server is
// removed in t.Cleanup. Tests skip (with the reason) when not root, without
// iproute2, or when the kernel or sandbox refuses network namespaces.
//
// The harness is Linux only; on other systems the package is empty.
package netnstest
