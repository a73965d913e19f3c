// Package harness is kproxy's benchmark harness, run as `kproxy-bench`
// (its own binary, so the node agent links none of it): scenarios (ports,
// startup, churn, chaos, client-address) against the kproxy under test
// started as a separate process, so its CPU, RSS and fds can be read from
// /proc, and optionally against HAProxy, direct connections and a baseline kproxy
// binary (an earlier build) in the same run. Everything runs on one machine
// over real loopback sockets: backends on 127.1.0.0/16, kproxy's service
// IPs in 127.2.0.0/16, HAProxy's frontends in 127.3.0.0/16, the bare UDP
// relay's in 127.4.0.0/16 and the baseline kproxy's in 127.5.0.0/16, so
// they never share an address. The exception is client-address, which
// needs a kernel portal: it runs kproxy with the nftables portal in a node
// network namespace it creates (client, node and pod namespaces on
// documentation addresses, removed when it ends). The hollow scenario
// measures no kproxy process: a core in the harness's own process serves
// hollow nodes run by child processes (hollow.go), as kubemark's hollow
// nodes measure kube-proxy.
package harness
