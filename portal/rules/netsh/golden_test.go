package netsh

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/rulestest"
)

// The netsh commands kproxy runs for the golden scenario of rulestest:
// every service IP once (rejected ones too: with no listener Windows
// refuses by itself), node ports ignored; then an incremental change and a
// cleanup. No Windows needed: the commands go through the exec seam.
func TestGoldenCommands(t *testing.T) {
	ctx := context.Background()
	f := &fakeNetsh{iface: "svc0", addrs: map[netip.Addr]bool{netip.MustParseAddr("172.30.160.1"): true}}
	n := rulestest.Program(newRules(rules.Options{Interface: "svc0"}, f.run, func(string) string { return "" }))
	var b strings.Builder
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b.WriteString("# " + name + "\n")
		for _, l := range f.lines {
			b.WriteString(l + "\n")
		}
		f.lines = nil
	}
	step("sync", n.Sync(ctx, rulestest.GoldenRules(t)))
	upserts, removals := rulestest.GoldenChange(t)
	step("apply: empty gets an endpoint, dns goes", n.Apply(ctx, upserts, removals))
	// 198.18.0.20 is lb's cluster IP; a second rule on it (UDP) adds no
	// address, and the address goes only with the last of the two rules.
	// lb's external and LB addresses stay.
	lb := rulestest.Rule("default/lb:tcp/TCP", "tcp", "198.18.0.20", 443, 40003)
	quic := rulestest.Rule("default/lb:quic/UDP", "udp", "198.18.0.20", 443, 40008)
	step("apply: a UDP rule shares lb's cluster IP", n.Apply(ctx, []rules.Rule{quic}, nil))
	step("apply: lb's TCP rule goes, the UDP rule keeps the IP", n.Apply(ctx, nil, []rules.Rule{lb}))
	step("apply: the UDP rule goes, the IP with it", n.Apply(ctx, nil, []rules.Rule{quic}))
	present, err := n.Present(ctx)
	step("present", err)
	if !present {
		t.Error("not Present after Sync and Apply")
	}
	step("cleanup", n.Cleanup(ctx))
	rulestest.Golden(t, "commands", b.String())
	if len(f.addrs) != 1 {
		t.Errorf("after Cleanup the interface holds %v, want only the administrator's address", f.addrs)
	}
}
