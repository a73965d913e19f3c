//go:build linux

package portal

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/portal/netnstest"
)

func ap(ip string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}

func needBinary(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install -y nftables iptables)", name)
	}
}

// serviceRules expands one service port into portal rules, as the Rules
// actor will: a rule per IP, plus the node port.
func serviceRules(sp, proto string, port, nodePort, proxyPort int, reject bool, ips ...string) []PortalRule {
	var rs []PortalRule
	for _, ip := range ips {
		rs = append(rs, PortalRule{ServicePort: sp, Protocol: proto, IP: netip.MustParseAddr(ip), Port: port, ProxyPort: proxyPort, Reject: reject})
	}
	if nodePort != 0 {
		rs = append(rs, PortalRule{ServicePort: sp, Protocol: proto, Port: nodePort, NodePort: true, ProxyPort: proxyPort, Reject: reject})
	}
	return rs
}

// portalTestRules is the shared scenario of the nftables and iptables tests:
//
//	a: 198.18.0.10 (cluster), 198.18.1.10 (external), 198.18.2.10 (LB),
//	   2001:db8:5::10, port 80, node port 30080 -> proxy port 18080, TCP and UDP
//	b: 198.18.0.20, 2001:db8:5::20 port 80, node port 30081: no endpoints (reject)
//	c: 198.18.0.30 port 8080 -> 18082, TCP
func portalTestRules(v6 bool) (a, b, c []PortalRule) {
	aIPs := []string{"198.18.0.10", "198.18.1.10", "198.18.2.10"}
	bIPs := []string{"198.18.0.20"}
	if v6 {
		aIPs = append(aIPs, "2001:db8:5::10")
		bIPs = append(bIPs, "2001:db8:5::20")
	}
	for _, proto := range []string{"tcp", "udp"} {
		sp := "default/a:http/" + strings.ToUpper(proto)
		a = append(a, serviceRules(sp, proto, 80, 30080, 18080, false, aIPs...)...)
		sp = "default/b:http/" + strings.ToUpper(proto)
		b = append(b, serviceRules(sp, proto, 80, 30081, 18081, true, bIPs...)...)
	}
	c = serviceRules("default/c:web/TCP", "tcp", 8080, 0, 18082, false, "198.18.0.30")
	return a, b, c
}

// checkPortalMatrix checks traffic for portalTestRules after Sync.
func checkPortalMatrix(t *testing.T, tp *netnstest.Topology, v6 bool) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		// From another host (prerouting): cluster, external, LB IPs, node port.
		for _, ip := range []string{"198.18.0.10", "198.18.1.10", "198.18.2.10"} {
			netnstest.ExpectEcho(t, tp.Client, proto, ap(ip, 80), 18080)
		}
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		// From the node itself (output): cluster IP and node ports.
		netnstest.ExpectEcho(t, tp.Node, proto, ap("198.18.0.10", 80), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, ap("127.0.0.1", 30080), 18080)
		// No endpoints: refused at once, from anywhere.
		netnstest.ExpectRefused(t, tp.Client, proto, ap("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		netnstest.ExpectRefused(t, tp.Node, proto, ap("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		if v6 {
			netnstest.ExpectEcho(t, tp.Client, proto, ap("2001:db8:5::10", 80), 18080)
			netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080), 18080)
			netnstest.ExpectEcho(t, tp.Node, proto, ap("2001:db8:5::10", 80), 18080)
			netnstest.ExpectEcho(t, tp.Node, proto, ap("::1", 30080), 18080)
			netnstest.ExpectRefused(t, tp.Client, proto, ap("2001:db8:5::20", 80))
			netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30081))
			netnstest.ExpectRefused(t, tp.Node, proto, ap("2001:db8:5::20", 80))
		}
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.30", 8080), 18082)
	netnstest.ExpectEcho(t, tp.Node, "tcp", ap("198.18.0.30", 8080), 18082)
}

// checkApply moves b from reject to proxy port 18081, removes c, adds d
// (198.18.0.40:80/TCP -> 18082), in one Apply.
func checkApply(t *testing.T, tp *netnstest.Topology, r Rules, b, c []PortalRule) {
	t.Helper()
	var upserts []PortalRule
	for _, rule := range b {
		rule.Reject = false
		upserts = append(upserts, rule)
	}
	upserts = append(upserts, serviceRules("default/d:http/TCP", "tcp", 80, 0, 18082, false, "198.18.0.40")...)
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, upserts, c) })
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.30", 8080))
	netnstest.ExpectNoAnswer(t, tp.Node, "tcp", ap("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.40", 80), 18082)
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, ap("198.18.0.20", 80), 18081)
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081), 18081)
		netnstest.ExpectEcho(t, tp.Node, proto, ap("198.18.0.20", 80), 18081)
	}
	// Applying the same changes again is a no-op, removing absent rules too.
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, upserts, c) })
	// And back: b rejects again.
	tp.Node.MustDo(t, func() error { return r.Apply(ctx, b, nil) })
	netnstest.ExpectRefused(t, tp.Client, "tcp", ap("198.18.0.20", 80))
	netnstest.ExpectRefused(t, tp.Client, "udp", netip.AddrPortFrom(netnstest.NodeIP4, 30081))
}

func present(t *testing.T, ns *netnstest.Netns, r Rules) bool {
	t.Helper()
	var ok bool
	ns.MustDo(t, func() (err error) {
		ok, err = r.Present(context.Background())
		return err
	})
	return ok
}

func startProxyPorts(t *testing.T, ns *netnstest.Netns) {
	for _, pp := range []int{18080, 18081, 18082} {
		netnstest.StartEcho(t, ns, pp, true)
	}
}

func newNftablesIn(t *testing.T, ns *netnstest.Netns, o RulesOptions) *Nftables {
	t.Helper()
	needBinary(t, "nft")
	var n *Nftables
	ns.MustDo(t, func() (err error) {
		n, err = NewNftables(context.Background(), o)
		return err
	})
	return n
}

func TestNftablesPortals(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	startProxyPorts(t, tp.Node)
	n := newNftablesIn(t, tp.Node, RulesOptions{})
	if !n.rejectInPrerouting {
		t.Log("kernel cannot reject in prerouting: using input/forward hooks, enabling forwarding")
		tp.SetForwarding(t, true)
	}
	ctx := context.Background()
	if present(t, tp.Node, n) {
		t.Fatal("Present before Sync")
	}
	a, b, c := portalTestRules(true)
	all := append(append(append([]PortalRule{}, a...), b...), c...)
	rootBefore, _ := exec.Command("nft", "list", "tables").Output()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !present(t, tp.Node, n) {
		t.Fatal("not Present after Sync")
	}
	if rootAfter, _ := exec.Command("nft", "list", "tables").Output(); string(rootAfter) != string(rootBefore) {
		t.Errorf("the test process's own namespace changed: %q -> %q", rootBefore, rootAfter)
	}
	t.Log(tp.Node.MustRun(t, "nft", "list", "table", "inet", NftablesTable))
	checkPortalMatrix(t, tp, true)
	checkApply(t, tp, n, b, c)

	// Someone flushes the ruleset: Present says so, Sync restores.
	tp.Node.MustRun(t, "nft", "flush", "ruleset")
	if present(t, tp.Node, n) {
		t.Fatal("Present after nft flush ruleset")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !present(t, tp.Node, n) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.10", 80), 18080)
	netnstest.ExpectEcho(t, tp.Client, "udp", ap("2001:db8:5::10", 80), 18080)
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.30", 8080), 18082)

	// Someone flushes one of kproxy's chains: Present notices.
	tp.Node.MustRun(t, "nft", "flush", "chain", "inet", NftablesTable, nftNatPrerouting)
	if present(t, tp.Node, n) {
		t.Fatal("Present after flushing nat-prerouting")
	}
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })

	// Someone deletes the table.
	tp.Node.MustRun(t, "nft", "delete", "table", "inet", NftablesTable)
	if present(t, tp.Node, n) {
		t.Fatal("Present after nft delete table")
	}
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !present(t, tp.Node, n) {
		t.Fatal("not Present after re-Sync")
	}

	// Sync with fewer rules drops the others.
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, a) })
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.10", 80), 18080)

	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
	if out := tp.Node.MustRun(t, "nft", "list", "tables"); strings.Contains(out, NftablesTable) {
		t.Errorf("table left after Cleanup: %s", out)
	}
	if present(t, tp.Node, n) {
		t.Error("Present after Cleanup")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.10", 80))
	// Cleanup of nothing is fine.
	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
}

// TestNftablesNodePortAddresses: node ports only on 192.0.2.0/24 (so not on
// IPv6 nor loopback), and the reject chains of kernels without prerouting
// reject (input/forward), with forwarding on.
func TestNftablesNodePortAddresses(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	startProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true)
	n := newNftablesIn(t, tp.Node, RulesOptions{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.2/32")}})
	n.rejectInPrerouting = false
	a, b, _ := portalTestRules(true)
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, append(a, b...)) })
	if !present(t, tp.Node, n) {
		t.Fatal("not Present after Sync")
	}
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectNoAnswer(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080))
		netnstest.ExpectNoAnswer(t, tp.Node, proto, ap("127.0.0.1", 30080))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		netnstest.ExpectRefused(t, tp.Client, proto, ap("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Client, proto, ap("2001:db8:5::20", 80))
		netnstest.ExpectRefused(t, tp.Node, proto, ap("198.18.0.20", 80))
		netnstest.ExpectEcho(t, tp.Client, proto, ap("198.18.0.10", 80), 18080)
	}
	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
}

// TestNftablesOutputUDPWithoutPktinfo: a UDP server that answers with a
// plain WriteTo from a wildcard socket (no IP_PKTINFO) still works for
// clients on the node, because the output chain DNATs to the packet's own
// source address rather than redirecting to loopback.
func TestNftablesOutputUDPWithoutPktinfo(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	netnstest.StartEcho(t, tp.Node, 18090, false)
	n := newNftablesIn(t, tp.Node, RulesOptions{})
	rules := serviceRules("default/dns:dns/UDP", "udp", 53, 30053, 18090, false, "198.18.0.53", "2001:db8:5::53")
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, rules) })
	netnstest.ExpectEcho(t, tp.Node, "udp", ap("198.18.0.53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Node, "udp", ap("2001:db8:5::53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Node, "udp", ap("127.0.0.1", 30053), 18090)
	netnstest.ExpectEcho(t, tp.Client, "udp", ap("198.18.0.53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Client, "udp", ap("2001:db8:5::53", 53), 18090)
	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
}

// TestNftablesRejectProbe: the kernel check behind the choice of reject
// hooks refuses reject where no kernel allows it.
func TestNftablesRejectProbe(t *testing.T) {
	t.Parallel()
	needBinary(t, "nft")
	ns := netnstest.New(t, "probe")
	var post, pre bool
	ns.MustDo(t, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if post, err = canReject(ctx, "postrouting"); err != nil {
			return err
		}
		pre, err = canReject(ctx, "prerouting")
		return err
	})
	if post {
		t.Error("probe accepts reject in postrouting")
	}
	t.Logf("reject in prerouting: %v", pre)
	if out := ns.MustRun(t, "nft", "list", "tables"); strings.TrimSpace(out) != "" {
		t.Errorf("probe left tables: %s", out)
	}
}

func TestNftablesRejectsBadRules(t *testing.T) {
	t.Parallel()
	ns := netnstest.New(t, "bad")
	n := newNftablesIn(t, ns, RulesOptions{})
	ctx := context.Background()
	bad := [][]PortalRule{
		{{Protocol: "sctp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: 1}},
		{{Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 0, ProxyPort: 1}},
		{{Protocol: "tcp", Port: 80, ProxyPort: 1}},
		{{Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80}},
		{{Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, NodePort: true, ProxyPort: 1}},
		{{Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: 1}, {Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: 2}},
	}
	for i, rs := range bad {
		ns.MustDo(t, func() error {
			if err := n.Sync(ctx, rs); err == nil {
				t.Errorf("Sync of bad rules %d (%v) succeeded", i, rs)
			}
			if err := n.Apply(ctx, rs, nil); err == nil {
				t.Errorf("Apply of bad rules %d (%v) succeeded", i, rs)
			}
			return nil
		})
	}
	if out := ns.MustRun(t, "nft", "list", "tables"); strings.TrimSpace(out) != "" {
		t.Errorf("bad rules left tables: %s", out)
	}
}

// benchRules is a mix of 10,000 service-port rules: IPv4 cluster IPs over
// TCP and UDP, IPv6 cluster IPs, node ports and services without endpoints.
func benchRules(n int) []PortalRule {
	rs := make([]PortalRule, 0, n)
	for i := 0; len(rs) < n; i++ {
		proto := "tcp"
		if i%2 == 1 {
			proto = "udp"
		}
		sp := fmt.Sprintf("bench/svc-%d:p/%s", i, strings.ToUpper(proto))
		r := PortalRule{ServicePort: sp, Protocol: proto, Port: 80 + i%2, ProxyPort: 20000 + i%40000}
		switch {
		case i%20 == 0:
			r.NodePort, r.Port = true, 30000+i/20
		case i%20 == 1:
			r.IP = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 5, 14: byte(i >> 8), 15: byte(i)})
		default:
			r.IP = netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
			r.Reject = i%20 == 2
		}
		rs = append(rs, r)
	}
	return rs
}

// benchChanges changes 1% of rules: a third removed, a third new, a third
// modified (proxy port or reject).
func benchChanges(rules []PortalRule) (upserts, removals []PortalRule) {
	n := len(rules) / 100
	for i := 0; i < n; i++ {
		r := rules[(i*97)%len(rules)]
		switch i % 3 {
		case 0:
			removals = append(removals, r)
		case 1:
			r.ProxyPort, r.Reject = r.ProxyPort+1, !r.Reject
			upserts = append(upserts, r)
		case 2:
			upserts = append(upserts, PortalRule{ServicePort: "bench/new", Protocol: "tcp", IP: netip.AddrFrom4([4]byte{198, 19, 200, byte(i)}), Port: 8080, ProxyPort: 40000 + i})
		}
	}
	return upserts, removals
}

// BenchmarkNftablesSync10k programs 10,000 rules with Sync, then changes 1%
// with one Apply, in a namespace of its own.
func BenchmarkNftablesSync10k(b *testing.B) {
	ns := netnstest.New(b, "bench")
	needBinary(b, "nft")
	ctx := context.Background()
	var n *Nftables
	ns.MustDo(b, func() (err error) {
		n, err = NewNftables(ctx, RulesOptions{})
		return err
	})
	rules := benchRules(10000)
	upserts, removals := benchChanges(rules)
	var full, incr time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ns.MustDo(b, func() error {
			start := time.Now()
			if err := n.Sync(ctx, rules); err != nil {
				return err
			}
			mid := time.Now()
			if err := n.Apply(ctx, upserts, removals); err != nil {
				return err
			}
			full += mid.Sub(start)
			incr += time.Since(mid)
			return nil
		})
	}
	b.StopTimer()
	fullMs := float64(full.Microseconds()) / 1000 / float64(b.N)
	incrMs := float64(incr.Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(fullMs, "full-sync-ms")
	b.ReportMetric(incrMs, "incremental-ms")
	b.ReportMetric(fullMs/incrMs, "ratio")
	var ok bool
	ns.MustDo(b, func() (err error) {
		ok, err = n.Present(ctx)
		return err
	})
	if !ok {
		b.Error("not Present after the benchmark")
	}
	if out := ns.MustRun(b, "sh", "-c", "nft list map inet kproxy service-ips-v4 | grep -c ' : '"); strings.TrimSpace(out) == "0" {
		b.Error("no elements programmed")
	}
}
