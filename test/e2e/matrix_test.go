//go:build linux

package e2e

import (
	"net/netip"
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// checkMatrix: from the client, cluster IP and node port (and with full,
// external and LB IPs, IPv4 and IPv6) reach a backend over TCP and UDP;
// from the node, the cluster IP and node port do (output hook); the service
// without endpoints is refused at once.
func (e *env) checkMatrix(t *testing.T, full bool) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		port, nodePort := webPort(proto), webNodePort(proto)
		emptyNodePort := emptyNodeTCP
		if proto == "udp" {
			emptyNodePort = emptyNodeUDP
		}
		ips := []string{webCluster4}
		if full {
			ips = append(ips, webExternal4, webLB4, webCluster6, webExternal6, webLB6)
		}
		for _, ip := range ips {
			e.expectBackend(t, e.tp.Client, proto, svcAddr(ip, port))
		}
		e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(nodePort)))
		e.expectBackend(t, e.tp.Node, proto, svcAddr(webCluster4, port))
		e.expectBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(nodePort)))
		if full {
			e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, uint16(nodePort)))
			e.expectBackend(t, e.tp.Node, proto, svcAddr(webCluster6, port))
		}

		netnstest.ExpectRefused(t, e.tp.Client, proto, svcAddr(empty4, port))
		netnstest.ExpectRefused(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(emptyNodePort)))
		netnstest.ExpectRefused(t, e.tp.Node, proto, svcAddr(empty4, port))
		if full {
			netnstest.ExpectRefused(t, e.tp.Client, proto, svcAddr(empty6, port))
		}
	}
}

// checkSpread wants answers from more than one backend over the whole
// matrix (round-robin across the endpoints).
func (e *env) checkSpread(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) < 2 {
		t.Errorf("answers came from %v only, want several of %v", e.seen, e.backendNames)
	}
}
