//go:build linux

package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/netnstest"
	"github.com/kproxy/kproxy/test/rulestest"
)

func newRulesIn(t *testing.T, ns *netnstest.Netns, o rules.Options) *tested {
	t.Helper()
	rulestest.NeedBinary(t, "nft")
	var n *Rules
	ns.MustDo(t, func() (err error) {
		n, err = New(context.Background(), o)
		return err
	})
	return program(n)
}

func TestNftablesPortals(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	rulestest.StartProxyPorts(t, tp.Node)
	n := newRulesIn(t, tp.Node, rules.Options{})
	if !n.rejectInPrerouting {
		t.Log("kernel cannot reject in prerouting: using input/forward hooks, enabling forwarding")
		tp.SetForwarding(t, true)
	}
	ctx := context.Background()
	if rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("Present before Sync")
	}
	a, b, c := rulestest.Scenario(true)
	all := append(append(append([]rules.Rule{}, a...), b...), c...)
	rootBefore, _ := exec.Command("nft", "list", "tables").Output()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("not Present after Sync")
	}
	if rootAfter, _ := exec.Command("nft", "list", "tables").Output(); string(rootAfter) != string(rootBefore) {
		t.Errorf("the test process's own namespace changed: %q -> %q", rootBefore, rootAfter)
	}
	t.Log(tp.Node.MustRun(t, "nft", "list", "table", "inet", Table))
	rulestest.CheckMatrix(t, tp, true)
	rulestest.CheckApply(t, tp, n.Programmed, b, c)

	// Someone flushes the ruleset: Present says so, Sync restores.
	tp.Node.MustRun(t, "nft", "flush", "ruleset")
	if rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("Present after nft flush ruleset")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80), 18080)
	netnstest.ExpectEcho(t, tp.Client, "udp", rulestest.AP("2001:db8:5::10", 80), 18080)
	netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("198.18.0.30", 8080), 18082)

	// Someone flushes one of kproxy's chains: Present notices.
	tp.Node.MustRun(t, "nft", "flush", "chain", "inet", Table, nftNatPrerouting)
	if rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("Present after flushing nat-prerouting")
	}
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })

	// Someone deletes the table.
	tp.Node.MustRun(t, "nft", "delete", "table", "inet", Table)
	if rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("Present after nft delete table")
	}
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("not Present after re-Sync")
	}

	// Sync with fewer rules drops the others.
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, a) })
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80), 18080)

	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
	if out := tp.Node.MustRun(t, "nft", "list", "tables"); strings.Contains(out, Table) {
		t.Errorf("table left after Cleanup: %s", out)
	}
	if rulestest.Present(t, tp.Node, n.Programmed) {
		t.Error("Present after Cleanup")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80))
	// Cleanup of nothing is fine.
	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
}

// TestNftablesNodePortAddresses: node ports only on 192.0.2.0/24 (so not on
// IPv6 nor loopback), and the reject chains of kernels without prerouting
// reject (input/forward), with forwarding on.
func TestNftablesNodePortAddresses(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	rulestest.StartProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true)
	n := newRulesIn(t, tp.Node, rules.Options{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.2/32")}})
	n.rejectInPrerouting = false
	a, b, _ := rulestest.Scenario(true)
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, append(a, b...)) })
	if !rulestest.Present(t, tp.Node, n.Programmed) {
		t.Fatal("not Present after Sync")
	}
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectNoAnswer(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080))
		netnstest.ExpectNoAnswer(t, tp.Node, proto, rulestest.AP("127.0.0.1", 30080))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
		netnstest.ExpectRefused(t, tp.Client, proto, rulestest.AP("198.18.0.20", 80))
		netnstest.ExpectRefused(t, tp.Client, proto, rulestest.AP("2001:db8:5::20", 80))
		netnstest.ExpectRefused(t, tp.Node, proto, rulestest.AP("198.18.0.20", 80))
		netnstest.ExpectEcho(t, tp.Client, proto, rulestest.AP("198.18.0.10", 80), 18080)
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
	n := newRulesIn(t, tp.Node, rules.Options{})
	dns := rulestest.ServiceRules("default/dns:dns/UDP", "udp", 53, 30053, 18090, false, "198.18.0.53", "2001:db8:5::53")
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return n.Sync(ctx, dns) })
	netnstest.ExpectEcho(t, tp.Node, "udp", rulestest.AP("198.18.0.53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Node, "udp", rulestest.AP("2001:db8:5::53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Node, "udp", rulestest.AP("127.0.0.1", 30053), 18090)
	netnstest.ExpectEcho(t, tp.Client, "udp", rulestest.AP("198.18.0.53", 53), 18090)
	netnstest.ExpectEcho(t, tp.Client, "udp", rulestest.AP("2001:db8:5::53", 53), 18090)
	tp.Node.MustDo(t, func() error { return n.Cleanup(ctx) })
}

// TestNftablesRejectProbe: the kernel check behind the choice of reject
// hooks refuses reject where no kernel allows it.
func TestNftablesRejectProbe(t *testing.T) {
	t.Parallel()
	rulestest.NeedBinary(t, "nft")
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
	n := newRulesIn(t, ns, rules.Options{})
	ctx := context.Background()
	bad := [][]rules.Rule{
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
func benchRules(n int) []rules.Rule {
	rs := make([]rules.Rule, 0, n)
	for i := 0; len(rs) < n; i++ {
		proto := "tcp"
		if i%2 == 1 {
			proto = "udp"
		}
		sp := fmt.Sprintf("bench/svc-%d:p/%s", i, strings.ToUpper(proto))
		r := rules.Rule{ServicePort: sp, Protocol: proto, Port: 80 + i%2, ProxyPort: 20000 + i%40000}
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
func benchChanges(rs []rules.Rule) (upserts, removals []rules.Rule) {
	n := len(rs) / 100
	for i := 0; i < n; i++ {
		r := rs[(i*97)%len(rs)]
		switch i % 3 {
		case 0:
			removals = append(removals, r)
		case 1:
			r.ProxyPort, r.Reject = r.ProxyPort+1, !r.Reject
			upserts = append(upserts, r)
		case 2:
			upserts = append(upserts, rules.Rule{ServicePort: "bench/new", Protocol: "tcp", IP: netip.AddrFrom4([4]byte{198, 19, 200, byte(i)}), Port: 8080, ProxyPort: 40000 + i})
		}
	}
	return upserts, removals
}

// BenchmarkNftablesSync10k programs 10,000 rules with Sync, then changes 1%
// with one Apply, in a namespace of its own.
func BenchmarkNftablesSync10k(b *testing.B) {
	ns := netnstest.New(b, "bench")
	rulestest.NeedBinary(b, "nft")
	ctx := context.Background()
	var r *Rules
	ns.MustDo(b, func() (err error) {
		r, err = New(ctx, rules.Options{})
		return err
	})
	n := program(r)
	all := benchRules(10000)
	upserts, removals := benchChanges(all)
	var full, incr time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ns.MustDo(b, func() error {
			start := time.Now()
			if err := n.Sync(ctx, all); err != nil {
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

// TestNftablesKernelTakesPolicies: the kernel accepts the golden scenario
// with every policy (drops, short-circuits, source ranges, cluster and
// service CIDRs), and an Apply that changes a firewall chain's ranges and
// removes another. The e2e tests prove the traffic.
func TestNftablesKernelTakesPolicies(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	n := newRulesIn(t, tp.Node, rulestest.GoldenCIDRs())
	rulestest.CheckTakesPolicies(t, tp.Node, n.Programmed)
	out := tp.Node.MustRun(t, "nft", "list", "table", "inet", Table)
	// 192.0.2.0/24 admits the node's IP, so the LB IP admits itself.
	if !strings.Contains(out, "ip saddr != { 192.0.2.0/24, 198.51.100.20 } drop") || strings.Contains(out, "2001:db8:7::/48") {
		t.Errorf("firewall chains after Apply:\n%s", out)
	}
}
