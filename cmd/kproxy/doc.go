// Command kproxy is a userspace Kubernetes service proxy built on actors.
//
//	kproxy run --source kube|file:PATH|remote:ADDR [flags]
//	kproxy watch --source kube|file:PATH|remote:ADDR [--json] [--callout CMD] [--serve ADDR]
//	kproxy cleanup [--portal nftables|iptables|netsh|all]
//	kproxy chaos crash|storm|endpoint|state ...
//	kproxy version
//
// The benchmark harness is a command of its own, cmd/kproxy-bench, so
// this binary links none of it (TestNodeAgentLinksNoBenchmark).
package main
