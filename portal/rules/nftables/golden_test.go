//go:build linux

package nftables

import (
	"context"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/rulestest"
)

// The table kproxy programs, as knftables' fake dumps it, for the golden
// scenario of rulestest (ClusterIP, external and LB IPs, node ports, two
// traffic scopes, rejects, dual stack). No root or nft needed: the rules
// are reviewable here; the netns tests prove them in a kernel.
func TestGoldenTable(t *testing.T) {
	for _, tc := range []struct {
		name               string
		opts               rules.Options
		rejectInPrerouting bool
	}{
		{"sync", rules.Options{}, true},
		{"sync-cluster-and-service-cidrs", rulestest.GoldenCIDRs(), true},
		{"sync-nodeport-addresses", rules.Options{NodePortAddresses: []netip.Prefix{
			netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.128/25"), netip.MustParsePrefix("2001:db8:1::/64")}}, true},
		{"sync-nodeport-addresses-v4-only", rules.Options{NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}, true},
		{"sync-no-reject-in-prerouting", rules.Options{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := knftables.NewFake(knftables.InetFamily, Table)
			n := program(newRules(fake, tc.opts, tc.rejectInPrerouting))
			if err := n.Sync(context.Background(), rulestest.GoldenRules(t)); err != nil {
				t.Fatal(err)
			}
			rulestest.Golden(t, tc.name, fake.Dump())
		})
	}
}

// TestGoldenApply: an incremental change touches map elements only.
func TestGoldenApply(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, Table)
	n := program(newRules(fake, rules.Options{}, true))
	if err := n.Sync(ctx, rulestest.GoldenRules(t)); err != nil {
		t.Fatal(err)
	}
	upserts, removals := rulestest.GoldenChange(t)
	if err := n.Apply(ctx, upserts, removals); err != nil {
		t.Fatal(err)
	}
	rulestest.Golden(t, "apply", fake.Dump())

	// Present holds on the fake table; Cleanup leaves nothing.
	if ok, err := n.Present(ctx); err != nil || !ok {
		t.Fatalf("Present = %v, %v after Sync", ok, err)
	}
	if err := n.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); dump != "" {
		t.Fatalf("after Cleanup the fake still holds:\n%s", dump)
	}
}
