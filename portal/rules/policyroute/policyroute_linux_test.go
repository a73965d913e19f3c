package policyroute

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/steer"
	"github.com/kproxy/kproxy/test/netnstest"
)

// In a namespace: Ensure adds one rule and one local route per family,
// twice changes nothing, Present sees them and notices a deleted rule,
// Remove leaves none, and Remove again is no error. Read back with ip(8).
func TestEnsureRemove(t *testing.T) {
	n := netnstest.New(t, "policyroute")
	table := fmt.Sprint(steer.TransparentTable)
	count := func() (rules, routes int) {
		for _, fam := range []string{"-4", "-6"} {
			out := n.MustRun(t, "ip", fam, "rule", "list")
			rules += strings.Count(out, "lookup "+table)
			out, _ = n.Run("ip", fam, "route", "show", "table", table)
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasPrefix(l, "local ") && strings.Contains(l, "dev lo") {
					routes++
				}
			}
		}
		return rules, routes
	}
	present := func() bool {
		var ok bool
		n.MustDo(t, func() (err error) { ok, err = Present(); return err })
		return ok
	}
	if present() {
		t.Fatal("Present before Ensure")
	}
	for range 2 {
		n.MustDo(t, Ensure)
		if rules, routes := count(); rules != 2 || routes != 2 {
			t.Fatalf("after Ensure: %d rules, %d routes; want 2 and 2 (one per family)", rules, routes)
		}
	}
	out := n.MustRun(t, "ip", "-4", "rule", "list")
	if want := fmt.Sprintf("%d:\tfrom all fwmark %#x/%#x lookup %s", steer.TransparentRulePriority, steer.TransparentReplyMark, steer.TransparentReplyMark, table); !strings.Contains(out, want) {
		t.Errorf("ip rule list:\n%s\nlacks %q", out, want)
	}
	if !present() {
		t.Error("Present after Ensure: false")
	}
	n.MustRun(t, "ip", "-6", "rule", "del", "lookup", table)
	if present() {
		t.Error("Present with the IPv6 rule deleted: true")
	}
	n.MustDo(t, Ensure)
	if !present() {
		t.Error("Present after Ensure again: false")
	}
	for range 2 {
		n.MustDo(t, Remove)
		if rules, routes := count(); rules != 0 || routes != 0 {
			t.Fatalf("after Remove: %d rules, %d routes left", rules, routes)
		}
	}
}
