package netsh

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/rulestest"
)

// A later process (a restart after a crash, `kproxy cleanup`) knows from
// the record which service IPs kproxy added: Sync removes the ones no
// longer wanted and Cleanup removes them all, leaving the
// administrator's address alone.
func TestRecordOutlivesTheProcess(t *testing.T) {
	ctx := context.Background()
	admin := netip.MustParseAddr("172.30.160.1")
	f := &fakeNetsh{iface: "svc0", addrs: map[netip.Addr]bool{admin: true}}
	opts := rules.Options{Interface: "svc0", StateDir: t.TempDir()}
	noenv := func(string) string { return "" }

	first := rulestest.Program(newRules(opts, f.run, noenv))
	if err := first.Sync(ctx, rulestest.GoldenRules(t)); err != nil {
		t.Fatal(err)
	}
	added := len(f.addrs) - 1
	// The process dies without cleaning up; the next one wants one IP less.
	second := rulestest.Program(newRules(opts, f.run, noenv))
	_, removals := rulestest.GoldenChange(t) // dns (198.18.0.53) goes
	var keep []rules.Rule
	for _, r := range rulestest.GoldenRules(t) {
		if !slicesContainsKey(removals, r) {
			keep = append(keep, r)
		}
	}
	if err := second.Sync(ctx, keep); err != nil {
		t.Fatal(err)
	}
	if f.addrs[netip.MustParseAddr("198.18.0.53")] {
		t.Error("a restarted process kept the previous one's address that no rule wants")
	}
	if len(f.addrs) != added {
		t.Errorf("after the restart's Sync the interface has %d addresses, want %d", len(f.addrs), added)
	}

	// `kproxy cleanup` in a fresh process removes everything kproxy added.
	if err := rulestest.Program(newRules(opts, f.run, noenv)).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.addrs) != 1 || !f.addrs[admin] {
		t.Errorf("after cleanup the interface has %v, want only the administrator's %s", f.addrs, admin)
	}
	if _, err := os.Stat(filepath.Join(opts.StateDir, recordFile)); !os.IsNotExist(err) {
		t.Errorf("the record outlived the cleanup: %v", err)
	}
}

func slicesContainsKey(rs []rules.Rule, r rules.Rule) bool {
	for _, x := range rs {
		if x.Key() == r.Key() {
			return true
		}
	}
	return false
}
