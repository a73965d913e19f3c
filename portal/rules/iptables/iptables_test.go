//go:build linux

package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/netnstest"
	"github.com/kproxy/kproxy/test/rulestest"
)

func newRulesIn(t *testing.T, ns *netnstest.Netns, o rules.Options) *tested {
	t.Helper()
	rulestest.NeedBinary(t, "iptables-restore")
	var ipt *Rules
	ns.MustDo(t, func() (err error) {
		ipt, err = New(context.Background(), o)
		return err
	})
	return program(ipt)
}

func TestIPTablesPortals(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	rulestest.StartProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true) // REJECT of non-local service IPs happens in FORWARD
	ipt := newRulesIn(t, tp.Node, rules.Options{})
	v6 := ipt.IPv6()
	if !v6 {
		t.Log("ip6tables unavailable: IPv4 only")
	}
	ctx := context.Background()
	if rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("Present before Sync")
	}
	a, b, c := rulestest.Scenario(v6)
	all := append(append(append([]rules.Rule{}, a...), b...), c...)
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after Sync")
	}
	t.Log(tp.Node.MustRun(t, "iptables-save"))
	rulestest.CheckMatrix(t, tp, v6)
	rulestest.CheckApply(t, tp, ipt.Programmed, b, c)
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after Apply")
	}

	// Someone removes the jump from PREROUTING: Present says so, Sync restores.
	tp.Node.MustRun(t, "iptables", "-w", "-t", "nat", "-F", "PREROUTING")
	if rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("Present after flushing PREROUTING")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80), 18080)

	// Someone flushes one of kproxy's chains, then the whole ruleset.
	tp.Node.MustRun(t, "iptables", "-w", "-t", "nat", "-F", iptPortalsContainer)
	if rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("Present after flushing " + iptPortalsContainer)
	}
	tp.Node.MustRun(t, "nft", "flush", "ruleset")
	if rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("Present after nft flush ruleset")
	}
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "udp", rulestest.AP("198.18.0.10", 80), 18080)
	if v6 {
		netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("2001:db8:5::10", 80), 18080)
	}

	// Sync with fewer rules drops the others and keeps one jump each.
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, a) })
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after a smaller Sync")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80), 18080)

	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out := tp.Node.MustRun(t, save); strings.Contains(out, "KUBE-PORTALS") || strings.Contains(out, "KUBE-NODEPORT") {
			t.Errorf("%s after Cleanup:\n%s", save, out)
		}
	}
	if rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Error("Present after Cleanup")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", rulestest.AP("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
}

func TestIPTablesNodePortAddresses(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	rulestest.StartProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true)
	ipt := newRulesIn(t, tp.Node, rules.Options{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	a, b, _ := rulestest.Scenario(ipt.IPv6())
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, append(a, b...)) })
	if !rulestest.Present(t, tp.Node, ipt.Programmed) {
		t.Fatal("not Present after Sync")
	}
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectNoAnswer(t, tp.Node, proto, rulestest.AP("127.0.0.1", 30080))
		netnstest.ExpectNoAnswer(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
	}
	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
}

// TestIPTablesKernelTakesPolicies: iptables-restore accepts the golden
// scenario with every policy (drops, short-circuits, source ranges in the
// mangle table, cluster and service CIDRs), Present agrees, and an Apply
// that changes ranges and removes others leaves it Present. The e2e tests
// prove the traffic.
func TestIPTablesKernelTakesPolicies(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	ipt := newRulesIn(t, tp.Node, rulestest.GoldenCIDRs())
	rulestest.CheckTakesPolicies(t, tp.Node, ipt.Programmed)
	out := tp.Node.MustRun(t, "iptables-save", "-t", "mangle")
	if !strings.Contains(out, "-s 192.0.2.0/24 -d 198.51.100.20/32") || strings.Contains(out, "203.0.113.0/24") {
		t.Errorf("mangle table after Apply:\n%s", out)
	}
}
