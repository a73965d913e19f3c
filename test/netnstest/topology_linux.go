//go:build linux

package netnstest

import (
	"fmt"
	"net/netip"
	"testing"
)

// Addresses of the test topology: the client and the node share a link
// (kc0 in the client, kn0 in the node); backends hang off the node on links
// of their own.
var (
	ClientIP4 = netip.MustParseAddr("192.0.2.1")
	NodeIP4   = netip.MustParseAddr("192.0.2.2")
	ClientIP6 = netip.MustParseAddr("2001:db8::1")
	NodeIP6   = netip.MustParseAddr("2001:db8::2")
)

// Service ranges, routed from the client via the node and, on the node, out
// of kn0 (a node's own packets need a route to reach the output hook).
const (
	ServiceRange4 = "198.18.0.0/15"
	ServiceRange6 = "2001:db8:5::/64"
)

// Topology is a client and a node namespace joined by a veth pair, and
// the backends added with AddBackend.
type Topology struct {
	Client, Node *Netns
	Backends     []*Backend
}

// NewTopology builds the client and node namespaces, with forwarding off on
// the node.
func NewTopology(t testing.TB) *Topology {
	t.Helper()
	tp := &Topology{Client: New(t, "client"), Node: New(t, "node")}
	c, n := tp.Client, tp.Node
	Veth(t, c, "kc0", n, "kn0")
	c.AddAddr(t, "kc0", ClientIP4.String()+"/24")
	c.AddAddr(t, "kc0", ClientIP6.String()+"/64")
	n.AddAddr(t, "kn0", NodeIP4.String()+"/24")
	n.AddAddr(t, "kn0", NodeIP6.String()+"/64")
	// The client reaches service IPs through the node; the node needs a
	// route for them too, or its own packets never reach the output hook.
	c.MustRun(t, "ip", "route", "add", ServiceRange4, "via", NodeIP4.String())
	c.MustRun(t, "ip", "-6", "route", "add", ServiceRange6, "via", NodeIP6.String())
	n.MustRun(t, "ip", "route", "add", ServiceRange4, "dev", "kn0")
	n.MustRun(t, "ip", "-6", "route", "add", ServiceRange6, "dev", "kn0")
	tp.SetForwarding(t, false)
	return tp
}

// SetForwarding turns IP forwarding on the node on or off.
func (tp *Topology) SetForwarding(t testing.TB, on bool) {
	t.Helper()
	v := "0"
	if on {
		v = "1"
	}
	// No ICMP redirects when forwarding: the node routes service IPs back out
	// of the interface they came in on, and the redirects would use up the
	// per-host ICMP rate limit that the reject's port unreachable needs.
	tp.Node.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward="+v, "net.ipv6.conf.all.forwarding="+v,
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.kn0.send_redirects=0")
}

// MaxBackends is how many backends AddBackend can add.
const MaxBackends = 4

// Backend is a namespace behind the node, on a link of its own (kb0 in the
// backend, kn<i+1> in the node): the node reaches it, the client does not.
// Backend i has the subnets 198.51.100.<64i>/26 and 2001:db8:1:<i>::/64; the
// node is the first address of each, the backend's IPs follow.
type Backend struct {
	*Netns
	// NodeIP4 and NodeIP6 are the node's addresses on the backend's link.
	NodeIP4, NodeIP6 netip.Addr
	// IPs4 and IPs6 are the backend's addresses.
	IPs4, IPs6 []netip.Addr
}

// AddBackend adds a backend namespace with n addresses of each family
// (1 <= n <= 60), reachable from the node.
func (tp *Topology) AddBackend(t testing.TB, n int) *Backend {
	t.Helper()
	i := len(tp.Backends)
	if i >= MaxBackends {
		t.Fatalf("netnstest: at most %d backends", MaxBackends)
	}
	if n < 1 || n > 60 {
		t.Fatalf("netnstest: backend with %d addresses, want 1 to 60", n)
	}
	b := &Backend{Netns: New(t, fmt.Sprintf("backend%d", i))}
	nodeDev := fmt.Sprintf("kn%d", i+1)
	Veth(t, b.Netns, "kb0", tp.Node, nodeDev)
	base := byte(64 * i)
	b.NodeIP4 = netip.AddrFrom4([4]byte{198, 51, 100, base + 1})
	b.NodeIP6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, byte(i), 15: 1})
	tp.Node.AddAddr(t, nodeDev, b.NodeIP4.String()+"/26")
	tp.Node.AddAddr(t, nodeDev, b.NodeIP6.String()+"/64")
	for k := 0; k < n; k++ {
		ip4 := netip.AddrFrom4([4]byte{198, 51, 100, base + 2 + byte(k)})
		ip6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, byte(i), 15: 2 + byte(k)})
		b.AddAddr(t, "kb0", ip4.String()+"/26")
		b.AddAddr(t, "kb0", ip6.String()+"/64")
		b.IPs4 = append(b.IPs4, ip4)
		b.IPs6 = append(b.IPs6, ip6)
	}
	tp.Backends = append(tp.Backends, b)
	return b
}
