package iptables

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/rulestest"
)

// What kproxy feeds iptables-restore, and the tables that result, for the
// golden scenario of rulestest. No root or iptables needed.
func TestGoldenRestore(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts rules.Options
	}{
		{"sync", rules.Options{}},
		{"sync-cluster-and-service-cidrs", rulestest.GoldenCIDRs()},
		{"sync-nodeport-addresses", rules.Options{NodePortAddresses: []netip.Prefix{
			netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/64")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeTables()
			r, err := newRules(ctx, tc.opts, f.run)
			ipt := program(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := ipt.Sync(ctx, rulestest.GoldenRules(t)); err != nil {
				t.Fatal(err)
			}
			rulestest.Golden(t, tc.name, f.take()+"\n# resulting tables\n"+f.dump())
			if ok, err := ipt.Present(ctx); err != nil || !ok {
				t.Fatalf("Present = %v, %v after Sync", ok, err)
			}
		})
	}
}

// TestGoldenApplyAndCleanup: an incremental change deletes and appends
// only the changed rules; a re-Sync replaces the jumps instead of adding
// more; Cleanup leaves the built-in chains as they were.
func TestGoldenApplyAndCleanup(t *testing.T) {
	ctx := context.Background()
	f := newFakeTables()
	pristine := f.dump()
	r, err := newRules(ctx, rules.Options{}, f.run)
	ipt := program(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := ipt.Sync(ctx, rulestest.GoldenRules(t)); err != nil {
		t.Fatal(err)
	}
	f.take()
	upserts, removals := rulestest.GoldenChange(t)
	if err := ipt.Apply(ctx, upserts, removals); err != nil {
		t.Fatal(err)
	}
	rulestest.Golden(t, "apply", f.take())
	synced := f.dump()
	if err := ipt.Sync(ctx, ipt.Set.Sorted()); err != nil {
		t.Fatal(err)
	}
	// Sync orders rules, Apply appends: the same rules, maybe in another order.
	if got := sortedLines(f.dump()); !slices.Equal(got, sortedLines(synced)) {
		t.Errorf("a second Sync of the same rules changed the tables:\n%s\nwant:\n%s", f.dump(), synced)
	}
	if ok, err := ipt.Present(ctx); err != nil || !ok {
		t.Fatalf("Present = %v, %v after Apply", ok, err)
	}
	if err := ipt.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.dump(); got != pristine {
		t.Errorf("after Cleanup:\n%s\nwant the tables as they were:\n%s", got, pristine)
	}
}

// Without ip6tables the IPv4 rules are programmed, and the IPv6 ones are
// left out and reported with ErrFamilyUnavailable: one missing family does
// not take the other's rules down. Later changes apply as usual.
func TestGoldenWithoutIP6Tables(t *testing.T) {
	ctx := context.Background()
	f := newFakeTables()
	f.noIPv6 = true
	r, err := newRules(ctx, rules.Options{}, f.run)
	ipt := program(r)
	if err != nil {
		t.Fatal(err)
	}
	if ipt.IPv6() {
		t.Fatal("IPv6() without ip6tables")
	}
	if err := ipt.Sync(ctx, rulestest.GoldenRules(t)); !errors.Is(err, rules.ErrFamilyUnavailable) {
		t.Fatalf("Sync with IPv6 rules = %v, want ErrFamilyUnavailable", err)
	}
	rulestest.Golden(t, "sync-without-ip6tables", f.take())
	if ok, err := ipt.Present(ctx); err != nil || !ok {
		t.Fatalf("Present = %v, %v; want the IPv4 rules in place", ok, err)
	}
	upserts, removals := rulestest.GoldenChange(t)
	if err := ipt.Apply(ctx, upserts, removals); err != nil {
		t.Fatalf("Apply of an IPv4 change = %v", err)
	}
	if !strings.Contains(f.take(), "-D KUBE-PORTALS-CONTAINER -d 198.18.0.53/32") {
		t.Error("the change did not reach iptables-restore")
	}
}

func sortedLines(s string) []string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return lines
}
