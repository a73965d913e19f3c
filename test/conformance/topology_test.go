//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// topology is one node and the two sides of it:
//
//	outside (192.0.2.1)  --kx0/kn0--  node (192.0.2.2, .111, .130)  --kp0/kq0--  pods (198.51.100.0/25)
//	 external clients 203.0.113.2, .130      runs kproxy                    a pod 198.51.100.2
//	 a pod on another node 198.51.100.200        |                          the endpoints
//	                                          ku0/kw0
//	                                             |
//	                                 upstream (203.0.113.250): the service
//	                                 CIDR, LB and external IPs are its own
//
// The outside routes the service CIDR, LB IPs (203.0.113.192/26) and the
// node's second IPv6 address via the node; the node routes the outside's
// clients back out of kn0, the pods' link to the pods, and the service
// CIDR, LB IPs and external IPs (203.0.113.192/26) upstream. Pods send
// everything via the node. Upstream is where a packet goes that kproxy
// leaves alone: it owns those ranges and its servers answer every port a
// flow uses ("pp=PORT"), so a packet that leaks out of the node is
// answered, not silently lost, and a DROP or a REJECT that is missing
// shows.
type topology struct {
	out, node, pods, up *netnstest.Netns
}

// Addresses of the topology.
var (
	nodeIP4    = netip.MustParseAddr("192.0.2.2")
	nodeIP6    = netip.MustParseAddr("2001:db8::2")
	sourceIPs4 = map[source]netip.Addr{
		fromExternal:  netip.MustParseAddr("203.0.113.2"),
		fromBlocked:   netip.MustParseAddr("203.0.113.130"),
		fromPodHere:   netip.MustParseAddr("198.51.100.2"),
		fromPodThere:  netip.MustParseAddr("198.51.100.200"),
		fromEndpoint:  netip.MustParseAddr("198.51.100.11"),
		fromNode:      nodeIP4,
		fromLocalhost: netip.MustParseAddr("127.0.0.1"),
		fromLBIP:      lbHairpinClient,
	}
	sourceIPs6 = map[source]netip.Addr{
		fromExternal:  netip.MustParseAddr("2001:db8:2::1"),
		fromPodHere:   netip.MustParseAddr("2001:db8:1::2"),
		fromPodThere:  netip.MustParseAddr("2001:db8:1:1::200"),
		fromNode:      nodeIP6,
		fromLocalhost: netip.MustParseAddr("::1"),
	}
	// endpointIPs are the pods that may be endpoints (all on the pods'
	// link: the node reaches them all, wherever the slice says they run).
	endpointIPs = []string{
		"198.51.100.11", "198.51.100.12", "198.51.100.13", "198.51.100.14", "198.51.100.15",
		"198.51.100.21", "198.51.100.22", "198.51.100.23", "198.51.100.31",
		"198.51.100.41", "198.51.100.42", "198.51.100.43", "198.51.100.44", "198.51.100.45",
		"2001:db8:1::11", "2001:db8:1::31",
	}
)

// Flags every kproxy of the suite gets: the cluster's CIDRs as
// kube-proxy's fake proxier has them, mapped.
const (
	clusterCIDRs      = "198.51.100.0/24,2001:db8:1::/48"
	serviceCIDRs      = "198.18.0.0/15,2001:db8:5::/64"
	nodePortAddresses = "192.0.2.2/32,2001:db8::2/128"
	nodeName          = "test-node"
)

// newTopology builds the namespaces; upstream answers on ports.
func newTopology(t *testing.T, ports []int) *topology {
	t.Helper()
	tp := &topology{out: netnstest.New(t, "out"), node: netnstest.New(t, "node"), pods: netnstest.New(t, "pods"), up: netnstest.New(t, "up")}
	o, n, p, u := tp.out, tp.node, tp.pods, tp.up
	netnstest.Veth(t, o, "kx0", n, "kn0")
	netnstest.Veth(t, n, "kp0", p, "kq0")
	netnstest.Veth(t, n, "ku0", u, "kw0")
	n.AddAddr(t, "ku0", "203.0.113.249/30")
	n.AddAddr(t, "ku0", "2001:db8:4::1/64")
	u.AddAddr(t, "kw0", "203.0.113.250/30")
	u.AddAddr(t, "kw0", "2001:db8:4::2/64")
	for _, r := range [][]string{
		{"local", "198.18.0.0/15", "dev", "lo"},
		{"local", "203.0.113.192/26", "dev", "lo"},
		{"-6", "local", "2001:db8:5::/64", "dev", "lo"},
		{"default", "via", "203.0.113.249"},
		{"-6", "default", "via", "2001:db8:4::1"},
	} {
		u.MustRun(t, route(r)...)
	}
	for _, port := range ports {
		netnstest.StartEcho(t, u, port, true)
	}
	for _, a := range []string{"192.0.2.1/24", "2001:db8::1/64", "203.0.113.2/32", "203.0.113.130/32",
		"198.51.100.200/32", "2001:db8:2::1/128", "2001:db8:1:1::200/128"} {
		o.AddAddr(t, "kx0", a)
	}
	for _, a := range []string{"192.0.2.2/24", "192.0.2.111/24", "192.0.2.130/24", "2001:db8::2/64", "2001:db8:3::2/128"} {
		n.AddAddr(t, "kn0", a)
	}
	n.AddAddr(t, "kp0", "198.51.100.1/25")
	n.AddAddr(t, "kp0", "2001:db8:1::1/64")
	p.AddAddr(t, "kq0", "198.51.100.2/25")
	p.AddAddr(t, "kq0", "2001:db8:1::2/64")
	for _, ip := range endpointIPs {
		bits := 25
		if netip.MustParseAddr(ip).Is6() {
			bits = 64
		}
		p.AddAddr(t, "kq0", fmt.Sprintf("%s/%d", ip, bits))
	}
	for _, r := range [][]string{
		{"198.18.0.0/15", "via", "192.0.2.2"},
		{"203.0.113.192/26", "via", "192.0.2.2"},
		{"-6", "2001:db8:5::/64", "via", "2001:db8::2"},
		{"-6", "2001:db8:3::/64", "via", "2001:db8::2"},
	} {
		o.MustRun(t, route(r)...)
	}
	for _, r := range [][]string{
		// Upstream, as a node's default route would take them (its own
		// packets need a route to reach the output hook, too).
		{"198.18.0.0/15", "via", "203.0.113.250"},
		{"203.0.113.192/26", "via", "203.0.113.250"},
		{"-6", "2001:db8:5::/64", "via", "2001:db8:4::2"},
		{"203.0.113.0/24", "via", "192.0.2.1"},
		{"198.51.100.128/25", "via", "192.0.2.1"},
		{"-6", "2001:db8:2::/64", "via", "2001:db8::1"},
		{"-6", "2001:db8:1:1::/64", "via", "2001:db8::1"},
	} {
		n.MustRun(t, route(r)...)
	}
	lbHairpin(t, o, n)
	p.MustRun(t, "ip", "route", "add", "default", "via", "198.51.100.1")
	p.MustRun(t, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1")
	// Forwarding on, as on a real node; no ICMP redirects, which would use
	// up the rate limit that a reject's ICMP answers need.
	n.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.kn0.send_redirects=0", "net.ipv4.conf.kp0.send_redirects=0", "net.ipv4.conf.ku0.send_redirects=0")
	return tp
}

// lbHairpinClient is where fromLBIP's connections start, in the outside
// namespace, which rewrites their source to the LB IP they are sent to:
// the cloud load balancer that sends a node's request for its VIP back to
// the node with the VIP as source. The node routes replies to such
// connections back out of kn0 (by a mark, policy routing table 100), not
// upstream where the LB range lives: as its load balancer would take them.
var lbHairpinClient = netip.MustParseAddr("203.0.113.3")

func lbHairpin(t *testing.T, out, node *netnstest.Netns) {
	t.Helper()
	out.AddAddr(t, "kx0", lbHairpinClient.String()+"/32")
	for _, c := range []struct {
		ns    *netnstest.Netns
		rules string
	}{
		{out, "table ip lb-hairpin {\n chain postrouting {\n type nat hook postrouting priority 100\n ip saddr " + lbHairpinClient.String() + " snat to ip daddr\n }\n}\n"},
		{node, "table ip lb-hairpin {\n chain output {\n type route hook output priority -150\n ct direction reply ct original ip saddr 203.0.113.192/26 meta mark set 0x1\n }\n}\n"},
	} {
		cmd := c.ns.Command(t.Context(), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(c.rules)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft in %s: %v\n%s", c.ns, err, b)
		}
	}
	node.MustRun(t, "ip", "rule", "add", "fwmark", "0x1", "lookup", "100")
	node.MustRun(t, "ip", "route", "add", "default", "via", "192.0.2.1", "table", "100")
}

// route is the ip command adding route r ("-6" first for IPv6).
func route(r []string) []string {
	if r[0] == "-6" {
		return append([]string{"ip", "-6", "route", "add"}, r[1:]...)
	}
	return append([]string{"ip", "route", "add"}, r...)
}

// from is the namespace and source address a flow's connection uses.
func (tp *topology) from(s source, ipv6 bool) (*netnstest.Netns, netip.Addr, error) {
	ips := sourceIPs4
	if ipv6 {
		ips = sourceIPs6
	}
	ip, ok := ips[s]
	if !ok {
		return nil, netip.Addr{}, fmt.Errorf("no %s source for this IP family", s)
	}
	switch s {
	case fromExternal, fromBlocked, fromPodThere, fromLBIP:
		return tp.out, ip, nil
	case fromPodHere, fromEndpoint:
		return tp.pods, ip, nil
	case fromNode, fromLocalhost:
		return tp.node, ip, nil
	}
	return nil, netip.Addr{}, fmt.Errorf("source %s is not in the topology", s)
}
