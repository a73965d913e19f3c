//go:build linux

package portal

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

func newIPTablesIn(t *testing.T, ns *netns, o RulesOptions) *IPTables {
	t.Helper()
	needBinary(t, "iptables-restore")
	var ipt *IPTables
	ns.mustDo(t, func() (err error) {
		ipt, err = NewIPTables(context.Background(), o)
		return err
	})
	return ipt
}

func TestIPTablesPortals(t *testing.T) {
	t.Parallel()
	tp := newTopology(t)
	startProxyPorts(t, tp.node)
	tp.setForwarding(t, true) // REJECT of non-local service IPs happens in FORWARD
	ipt := newIPTablesIn(t, tp.node, RulesOptions{})
	v6 := ipt.IPv6()
	if !v6 {
		t.Log("ip6tables unavailable: IPv4 only")
	}
	ctx := context.Background()
	if present(t, tp.node, ipt) {
		t.Fatal("Present before Sync")
	}
	a, b, c := portalTestRules(v6)
	all := append(append(append([]PortalRule{}, a...), b...), c...)
	tp.node.mustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after Sync")
	}
	t.Log(tp.node.mustRun(t, "iptables-save"))
	checkPortalMatrix(t, tp, v6)
	checkApply(t, tp, ipt, b, c)
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after Apply")
	}

	// Someone removes the jump from PREROUTING: Present says so, Sync restores.
	tp.node.mustRun(t, "iptables", "-w", "-t", "nat", "-F", "PREROUTING")
	if present(t, tp.node, ipt) {
		t.Fatal("Present after flushing PREROUTING")
	}
	expectNoAnswer(t, tp.client, "tcp", ap("198.18.0.10", 80))
	tp.node.mustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after re-Sync")
	}
	expectAnswer(t, tp.client, "tcp", ap("198.18.0.10", 80), 18080)

	// Someone flushes one of kproxy's chains, then the whole ruleset.
	tp.node.mustRun(t, "iptables", "-w", "-t", "nat", "-F", iptPortalsContainer)
	if present(t, tp.node, ipt) {
		t.Fatal("Present after flushing " + iptPortalsContainer)
	}
	tp.node.mustRun(t, "nft", "flush", "ruleset")
	if present(t, tp.node, ipt) {
		t.Fatal("Present after nft flush ruleset")
	}
	tp.node.mustDo(t, func() error { return ipt.Sync(ctx, all) })
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after re-Sync")
	}
	expectAnswer(t, tp.client, "udp", ap("198.18.0.10", 80), 18080)
	if v6 {
		expectAnswer(t, tp.client, "tcp", ap("2001:db8:5::10", 80), 18080)
	}

	// Sync with fewer rules drops the others and keeps one jump each.
	tp.node.mustDo(t, func() error { return ipt.Sync(ctx, a) })
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after a smaller Sync")
	}
	expectNoAnswer(t, tp.client, "tcp", ap("198.18.0.30", 8080))
	expectAnswer(t, tp.client, "tcp", ap("198.18.0.10", 80), 18080)

	tp.node.mustDo(t, func() error { return ipt.Cleanup(ctx) })
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if out := tp.node.mustRun(t, save); strings.Contains(out, "KUBE-PORTALS") || strings.Contains(out, "KUBE-NODEPORT") {
			t.Errorf("%s after Cleanup:\n%s", save, out)
		}
	}
	if present(t, tp.node, ipt) {
		t.Error("Present after Cleanup")
	}
	expectNoAnswer(t, tp.client, "tcp", ap("198.18.0.10", 80))
	tp.node.mustDo(t, func() error { return ipt.Cleanup(ctx) })
}

func TestIPTablesNodePortAddresses(t *testing.T) {
	t.Parallel()
	tp := newTopology(t)
	startProxyPorts(t, tp.node)
	tp.setForwarding(t, true)
	ipt := newIPTablesIn(t, tp.node, RulesOptions{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	a, b, _ := portalTestRules(ipt.IPv6())
	ctx := context.Background()
	tp.node.mustDo(t, func() error { return ipt.Sync(ctx, append(a, b...)) })
	if !present(t, tp.node, ipt) {
		t.Fatal("not Present after Sync")
	}
	for _, proto := range []string{"tcp", "udp"} {
		expectAnswer(t, tp.client, proto, netip.AddrPortFrom(nodeIP4, 30080), 18080)
		expectAnswer(t, tp.node, proto, netip.AddrPortFrom(nodeIP4, 30080), 18080)
		expectNoAnswer(t, tp.node, proto, ap("127.0.0.1", 30080))
		expectNoAnswer(t, tp.client, proto, netip.AddrPortFrom(nodeIP6, 30080))
		expectRefused(t, tp.client, proto, netip.AddrPortFrom(nodeIP4, 30081))
	}
	tp.node.mustDo(t, func() error { return ipt.Cleanup(ctx) })
}
