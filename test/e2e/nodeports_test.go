//go:build linux

package e2e

import (
	"net/netip"
	"testing"
)

// checkNodePortsOnLoopback: without --nodeport-addresses, node ports are
// on every local address, loopback too.
func (e *env) checkNodePortsOnLoopback(t *testing.T) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		e.expectBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(webNodePort(proto))))
	}
}

// checkNodePortAddresses: with --nodeport-addresses 192.0.2.0/24 (the
// client's link), node ports are neither on loopback nor on the node's
// backend link.
func (e *env) checkNodePortAddresses(t *testing.T) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		e.expectNoBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(webNodePort(proto))))
		e.expectNoBackend(t, e.tp.Node, proto, netip.AddrPortFrom(e.be.NodeIP4, uint16(webNodePort(proto))))
	}
}
