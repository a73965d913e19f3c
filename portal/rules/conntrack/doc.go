// Package conntrack removes kernel connection-tracking entries that portal
// rules have made stale.
//
// The kernel NATs a flow by its conntrack entry, made from the rules in
// force at its first packet. A UDP client that keeps sending from one
// source port keeps its entry alive, so it keeps going to the proxy port
// its entry names: after kproxy restarts on another proxy port, or after
// the service lost its endpoints (its rule now rejects), the client's
// datagrams go to a dead port until the entry idles out. kube-proxy deletes
// such entries through netlink; so does this package
// (github.com/vishvananda/netlink, kube-proxy's choice). TCP needs none of
// this: a new connection is a new entry.
package conntrack
