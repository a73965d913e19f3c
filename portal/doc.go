// Package portal holds kproxy's data path in plain Go: listeners (and the
// registry that keeps their sockets across Portal restarts), the TCP splice
// proxy, UDP flows, the proxy-port allocator, endpoint dial faults and the
// Picker a connection asks for its endpoint. Actors own the lifetimes;
// nothing here knows about actors.
//
// The portal modes are named in mode.go. The kernel rules that steer
// service traffic to the listeners in the kernel modes live in portal/rules
// (the rule model, the diff planner, the interface and its fake) and one
// package per mode: portal/rules/nftables, portal/rules/iptables and
// portal/rules/netsh.
package portal
