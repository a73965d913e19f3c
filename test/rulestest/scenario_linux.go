//go:build linux

package rulestest

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/netnstest"
)

func AP(ip string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}

func NeedBinary(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install -y nftables iptables)", name)
	}
}

// ServiceRules expands one service port into portal rules, as the Rules
// actor will: a rule per IP, plus the node port.
func ServiceRules(sp, proto string, port, nodePort, proxyPort int, reject bool, ips ...string) []rules.Rule {
	var rs []rules.Rule
	for _, ip := range ips {
		rs = append(rs, rules.Rule{ServicePort: sp, Protocol: proto, IP: netip.MustParseAddr(ip), Port: port, ProxyPort: proxyPort, Reject: reject})
	}
	if nodePort != 0 {
		rs = append(rs, rules.Rule{ServicePort: sp, Protocol: proto, Port: nodePort, NodePort: true, ProxyPort: proxyPort, Reject: reject})
	}
	return rs
}

// Scenario is the shared scenario of the nftables and iptables tests:
//
//	a: 198.18.0.10 (cluster), 198.18.1.10 (external), 198.18.2.10 (LB),
//	   2001:db8:5::10, port 80, node port 30080 -> proxy port 18080, TCP and UDP
//	b: 198.18.0.20, 2001:db8:5::20 port 80, node port 30081: no endpoints (reject)
//	c: 198.18.0.30 port 8080 -> 18082, TCP
func Scenario(v6 bool) (a, b, c []rules.Rule) {
	aIPs := []string{"198.18.0.10", "198.18.1.10", "198.18.2.10"}
	bIPs := []string{"198.18.0.20"}
	if v6 {
		aIPs = append(aIPs, "2001:db8:5::10")
		bIPs = append(bIPs, "2001:db8:5::20")
	}
	for _, proto := range []string{"tcp", "udp"} {
		sp := "default/a:http/" + strings.ToUpper(proto)
		a = append(a, ServiceRules(sp, proto, 80, 30080, 18080, false, aIPs...)...)
		sp = "default/b:http/" + strings.ToUpper(proto)
		b = append(b, ServiceRules(sp, proto, 80, 30081, 18081, true, bIPs...)...)
	}
	c = ServiceRules("default/c:web/TCP", "tcp", 8080, 0, 18082, false, "198.18.0.30")
	return a, b, c
}

// CheckMatrix checks traffic for portalTestRules after Sync.
func CheckMatrix(t *testing.T, tp *netnstest.Topology, v6 bool) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		// From another host (prerouting): cluster, external, LB IPs, node port.
		for _, ip := range []string{"198.18.0.10", "198.18.1.10", "198.18.2.10"} {
			netnstest.ExpectEcho(t, tp.Client, proto, AP(ip, 80), 18080)
		}
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		// From the node itself (output): cluster IP and node ports.
		netnstest.ExpectEcho(t, tp.Node, proto, AP("198.18.0.10", 80), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, AP("127.0.0.1", 30080), 18080)
		// No endpoints: refused at once, from anywhere.
		netnstest.ExpectRefused(t, tp.Client, proto, AP("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		netnstest.ExpectRefused(t, tp.Node, proto, AP("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		if v6 {
			netnstest.ExpectEcho(t, tp.Client, proto, AP("2001:db8:5::10", 80), 18080)
			netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080), 18080)
			netnstest.ExpectEcho(t, tp.Node, proto, AP("2001:db8:5::10", 80), 18080)
			netnstest.ExpectEcho(t, tp.Node, proto, AP("::1", 30080), 18080)
			netnstest.ExpectRefused(t, tp.Client, proto, AP("2001:db8:5::20", 80))
			netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30081))
			netnstest.ExpectRefused(t, tp.Node, proto, AP("2001:db8:5::20", 80))
		}
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", AP("198.18.0.30", 8080), 18082)
	netnstest.ExpectEcho(t, tp.Node, "tcp", AP("198.18.0.30", 8080), 18082)
}

// CheckApply moves b from reject to proxy port 18081, removes c, adds d
// (198.18.0.40:80/TCP -> 18082), in one Apply.
func CheckApply(t *testing.T, tp *netnstest.Topology, r *Programmed, b, c []rules.Rule) {
	t.Helper()
	var upserts []rules.Rule
	for _, rule := range b {
		rule.Reject = false
		upserts = append(upserts, rule)
	}
	upserts = append(upserts, ServiceRules("default/d:http/TCP", "tcp", 80, 0, 18082, false, "198.18.0.40")...)
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, upserts, c) })
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", AP("198.18.0.30", 8080))
	netnstest.ExpectNoAnswer(t, tp.Node, "tcp", AP("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", AP("198.18.0.40", 80), 18082)
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, AP("198.18.0.20", 80), 18081)
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081), 18081)
		netnstest.ExpectEcho(t, tp.Node, proto, AP("198.18.0.20", 80), 18081)
	}
	// Applying the same changes again is a no-op, removing absent rules too.
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, upserts, c) })
	// And back: b rejects again.
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, b, nil) })
	netnstest.ExpectRefused(t, tp.Client, "tcp", AP("198.18.0.20", 80))
	netnstest.ExpectRefused(t, tp.Client, "udp", netip.AddrPortFrom(netnstest.NodeIP4, 30081))
}

// CheckTakesPolicies syncs the golden rules into r in ns, then applies
// goldenPolicyChanges; r must be Present after each. The caller checks
// its kernel's rules for the change.
func CheckTakesPolicies(t *testing.T, ns *netnstest.Netns, r *Programmed) {
	t.Helper()
	ctx := context.Background()
	all := GoldenRules(t)
	ns.MustDo(t, func() error { return r.Sync(ctx, all) })
	if !Present(t, ns, r) {
		t.Fatal("not Present after Sync")
	}
	changed, removed, flipped := goldenPolicyChanges(t, all)
	ns.MustDo(t, func() error { return r.Apply(ctx, changed, removed) })
	ns.MustDo(t, func() error { return r.Apply(ctx, flipped, nil) })
	if !Present(t, ns, r) {
		t.Fatal("not Present after Apply")
	}
}

func Present(t *testing.T, ns *netnstest.Netns, r *Programmed) bool {
	t.Helper()
	var ok bool
	ns.MustDo(t, func() (err error) {
		ok, err = r.Present(context.Background())
		return err
	})
	return ok
}

func StartProxyPorts(t *testing.T, ns *netnstest.Netns) {
	for _, pp := range []int{18080, 18081, 18082} {
		netnstest.StartEcho(t, ns, pp, true)
	}
}
