// Package portal holds kproxy's data path in plain Go: listeners (and the
// registry that keeps their sockets across Portal restarts), the TCP splice
// proxy, UDP flows, the connection tracker, limits and idle timeouts, the
// proxy-port allocator, endpoint dial and accept faults and the Picker a
// connection asks for its endpoint. Actors own the lifetimes; nothing here
// knows about actors.
//
// The kernel rules that steer service traffic to the listeners in the
// kernel modes live beside it, not under it: portal/rules (the rule model,
// the diff planner, the interface and its fake) and one package per mode,
// portal/rules/nftables, portal/rules/iptables and portal/rules/netsh. What
// the two sides must agree on (the portal modes, the proxy-port socket
// mark, a protocol's network, which endpoints the external proxy port
// serves) is portal/steer; steer.go re-exports it here.
package portal
