//go:build linux

package portal

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/netnstest"
)

func newIPTablesIn(t *testing.T, ns *netnstest.Netns, o RulesOptions) *IPTables {
	t.Helper()
	needBinary(t, "iptables-restore")
	var ipt *IPTables
	ns.MustDo(t, func() (err error) {
		ipt, err = NewIPTables(context.Background(), o)
		return err
	})
	return ipt
}

func TestIPTablesPortals(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	startProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true) // REJECT of non-local service IPs happens in FORWARD
	ipt := newIPTablesIn(t, tp.Node, RulesOptions{})
	v6 := ipt.IPv6()
	if !v6 {
		t.Log("ip6tables unavailable: IPv4 only")
	}
	ctx := context.Background()
	if present(t, tp.Node, ipt) {
		t.Fatal("Present before Sync")
	}
	a, b, c := portalTestRules(v6)
	all := append(append(append([]PortalRule{}, a...), b...), c...)
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after Sync")
	}
	t.Log(tp.Node.MustRun(t, "iptables-save"))
	checkPortalMatrix(t, tp, v6)
	checkApply(t, tp, ipt, b, c)
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after Apply")
	}

	// Someone removes the jump from PREROUTING: Present says so, Sync restores.
	tp.Node.MustRun(t, "iptables", "-w", "-t", "nat", "-F", "PREROUTING")
	if present(t, tp.Node, ipt) {
		t.Fatal("Present after flushing PREROUTING")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.10", 80), 18080)

	// Someone flushes one of kproxy's chains, then the whole ruleset.
	tp.Node.MustRun(t, "iptables", "-w", "-t", "nat", "-F", iptPortalsContainer)
	if present(t, tp.Node, ipt) {
		t.Fatal("Present after flushing " + iptPortalsContainer)
	}
	tp.Node.MustRun(t, "nft", "flush", "ruleset")
	if present(t, tp.Node, ipt) {
		t.Fatal("Present after nft flush ruleset")
	}
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after re-Sync")
	}
	netnstest.ExpectEcho(t, tp.Client, "udp", ap("198.18.0.10", 80), 18080)
	if v6 {
		netnstest.ExpectEcho(t, tp.Client, "tcp", ap("2001:db8:5::10", 80), 18080)
	}

	// Sync with fewer rules drops the others and keeps one jump each.
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, a) })
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after a smaller Sync")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.30", 8080))
	netnstest.ExpectEcho(t, tp.Client, "tcp", ap("198.18.0.10", 80), 18080)

	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out := tp.Node.MustRun(t, save); strings.Contains(out, "KUBE-PORTALS") || strings.Contains(out, "KUBE-NODEPORT") {
			t.Errorf("%s after Cleanup:\n%s", save, out)
		}
	}
	if present(t, tp.Node, ipt) {
		t.Error("Present after Cleanup")
	}
	netnstest.ExpectNoAnswer(t, tp.Client, "tcp", ap("198.18.0.10", 80))
	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
}

func TestIPTablesNodePortAddresses(t *testing.T) {
	t.Parallel()
	tp := netnstest.NewTopology(t)
	startProxyPorts(t, tp.Node)
	tp.SetForwarding(t, true)
	ipt := newIPTablesIn(t, tp.Node, RulesOptions{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	a, b, _ := portalTestRules(ipt.IPv6())
	ctx := context.Background()
	tp.Node.MustDo(t, func() error { return ipt.Sync(ctx, append(a, b...)) })
	if !present(t, tp.Node, ipt) {
		t.Fatal("not Present after Sync")
	}
	for _, proto := range []string{"tcp", "udp"} {
		netnstest.ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30080), 18080)
		netnstest.ExpectNoAnswer(t, tp.Node, proto, ap("127.0.0.1", 30080))
		netnstest.ExpectNoAnswer(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, 30080))
		netnstest.ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, 30081))
	}
	tp.Node.MustDo(t, func() error { return ipt.Cleanup(ctx) })
}
