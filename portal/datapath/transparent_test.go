package datapath

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

// transparentSource: the client's address (unmapped) for a node-local
// endpoint of a service that preserves it; none when off, for the node's
// loopback, for a client that is the endpoint itself, and for an endpoint
// on another node, which is counted as a fallback; none, counted, when
// the endpoint's reply would bypass the node (here: the client in
// 198.51.100.0/25, the endpoint's link, or the endpoint 198.51.100.200,
// the node's own address).
func TestTransparentSource(t *testing.T) {
	defer func(f func(netip.Addr, netip.Addr) bool) { replyBypassesNode = f }(replyBypassesNode)
	link := netip.MustParsePrefix("198.51.100.0/25")
	replyBypassesNode = func(client, ep netip.Addr) bool {
		return ep == netip.MustParseAddr("198.51.100.200") || link.Contains(ep) && link.Contains(client)
	}
	client := netip.MustParseAddr("192.0.2.1")
	local := Pick{Endpoint: "198.51.100.2:80", Local: true}
	for _, tc := range []struct {
		name   string
		on     bool
		client netip.Addr
		pick   Pick
		want   netip.Addr // invalid: none
		remote int64      // remote fallbacks counted
		bypass int64      // bypass fallbacks counted
	}{
		{"local", true, client, local, client, 0, 0},
		{"IPv4-mapped client", true, netip.MustParseAddr("::ffff:192.0.2.1"), local, client, 0, 0},
		{"IPv6", true, netip.MustParseAddr("2001:db8::1"), Pick{Endpoint: "[2001:db8:1::2]:80", Local: true}, netip.MustParseAddr("2001:db8::1"), 0, 0},
		{"off", false, client, local, netip.Addr{}, 0, 0},
		{"loopback client", true, netip.MustParseAddr("127.0.0.1"), local, netip.Addr{}, 0, 0},
		{"IPv6 loopback client", true, netip.MustParseAddr("::1"), Pick{Endpoint: "[2001:db8:1::2]:80", Local: true}, netip.Addr{}, 0, 0},
		{"client is the endpoint", true, netip.MustParseAddr("198.51.100.2"), local, netip.Addr{}, 0, 0},
		{"remote endpoint", true, client, Pick{Endpoint: "198.51.100.3:80"}, netip.Addr{}, 1, 0},
		{"client on the endpoint's link", true, netip.MustParseAddr("198.51.100.5"), local, netip.Addr{}, 0, 1},
		{"client on another node's pod network", true, netip.MustParseAddr("198.51.100.130"), local, netip.MustParseAddr("198.51.100.130"), 0, 0},
		{"host-network endpoint", true, client, Pick{Endpoint: "198.51.100.200:80", Local: true}, netip.Addr{}, 0, 1},
	} {
		before, _, bypassBefore := TransparentFallbacks()
		got, ok := transparentSource(tc.on, nil, tc.client, tc.pick)
		after, _, bypassAfter := TransparentFallbacks()
		if ok != tc.want.IsValid() || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
		if after-before != tc.remote {
			t.Errorf("%s: %d remote fallbacks counted, want %d", tc.name, after-before, tc.remote)
		}
		if bypassAfter-bypassBefore != tc.bypass {
			t.Errorf("%s: %d bypass fallbacks counted, want %d", tc.name, bypassAfter-bypassBefore, tc.bypass)
		}
	}
}

// With pod clients, a pod of this node (within the pods' prefixes, on a
// link of this node) is dialled from its address to every endpoint, on
// this node or another, whatever the service; a client within the
// prefixes behind a gateway (a pod of another node, through a node port)
// or outside them (a host on the node's LAN) only as the service says.
func TestTransparentSourceForPodClients(t *testing.T) {
	defer func(f func(netip.Addr, netip.Addr) bool) { replyBypassesNode = f }(replyBypassesNode)
	replyBypassesNode = func(client, ep netip.Addr) bool {
		return ep == netip.MustParseAddr("198.51.100.200") || ep == netip.MustParseAddr("198.51.100.201") && client.Is4()
	}
	pods := NewPodClients([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})
	pods.link = func(a netip.Addr) (endpointLink, bool) {
		return endpointLink{gateway: !netip.MustParsePrefix("10.244.1.0/24").Contains(a)}, true // this node's pods: 10.244.1.0/24
	}
	pod, otherPod, lan := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.5"), netip.MustParseAddr("192.0.2.9")
	local, remote := Pick{Endpoint: "10.244.1.9:80", Local: true}, Pick{Endpoint: "10.244.2.9:80"}
	for _, tc := range []struct {
		name   string
		on     bool
		pods   *PodClients
		client netip.Addr
		pick   Pick
		want   netip.Addr
	}{
		{"pod to an endpoint on another node", false, pods, pod, remote, pod},
		{"pod to an endpoint on this node", false, pods, pod, local, pod},
		{"pod, no pod clients", false, nil, pod, remote, netip.Addr{}},
		{"pod to itself", false, pods, pod, Pick{Endpoint: "10.244.1.5:80", Local: true}, netip.Addr{}},
		{"pod to a host-network endpoint here", false, pods, pod, Pick{Endpoint: "198.51.100.200:80", Local: true}, netip.Addr{}},
		{"another node's pod, to a remote endpoint", true, pods, otherPod, remote, netip.Addr{}},
		{"another node's pod, to a local endpoint of a preserving service", true, pods, otherPod, local, otherPod},
		{"another node's pod, service not preserving", false, pods, otherPod, local, netip.Addr{}},
		{"a host off the pods' prefixes", false, pods, lan, local, netip.Addr{}},
		// A pod and an endpoint "on another node" that share a link (one
		// flat network): the endpoint answers the pod directly.
		{"pod to a remote endpoint on its own link", false, pods, pod, Pick{Endpoint: "198.51.100.201:80"}, netip.Addr{}},
	} {
		got, ok := transparentSource(tc.on, tc.pods, tc.client, tc.pick)
		if ok != tc.want.IsValid() || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}

// A dial's error is the endpoint's (the ladder handles it: no fallback to
// the node's address) when it refused, was unreachable or did not answer;
// the kernel refusing the client's address is not.
func TestEndpointAnswered(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{syscall.ECONNREFUSED, true},
		{syscall.EHOSTUNREACH, true},
		{syscall.ENETUNREACH, true},
		{timeoutError{}, true},
		{syscall.EADDRNOTAVAIL, false},
		{syscall.EADDRINUSE, false},
		{syscall.EPERM, false},
		{errors.New("setsockopt transparent: operation not permitted"), false},
	} {
		if got := endpointAnswered(tc.err); got != tc.want {
			t.Errorf("endpointAnswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
