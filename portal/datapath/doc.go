// Package datapath holds kproxy's data path in plain Go: listeners (each
// service port's Sockets, which its record keeps across Portal restarts,
// and the process's table of them by address), the TCP splice
// proxy, UDP flows, the connection tracker, limits and idle timeouts, the
// proxy-port allocator, endpoint dial and accept faults and the Picker a
// connection asks for its endpoint. Actors own the lifetimes; nothing here
// knows about actors.
//
// Beside it under portal/: the kernel portal rules that steer service
// traffic to the listeners in the kernel modes, portal/rules (the rule
// model, the diff planner, the interface and its fake) and one package per
// mode, portal/rules/nftables, portal/rules/iptables and portal/rules/netsh;
// what the two sides must agree on (the portal modes, the proxy-port socket
// mark, a protocol's network, which endpoints the external proxy port
// serves), portal/steer, which steer.go re-exports here.
package datapath
