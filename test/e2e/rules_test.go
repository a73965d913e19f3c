//go:build linux

package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// rules dumps kproxy's kernel rules in the node: nft list table inet
// kproxy, or iptables-save and ip6tables-save.
func (e *env) rules(t *testing.T) string {
	t.Helper()
	if e.mode == "nftables" {
		out, err := e.tp.Node.Run("nft", "list", "table", "inet", "kproxy")
		if err != nil {
			return "" // no table
		}
		return out
	}
	out := e.tp.Node.MustRun(t, "iptables-save")
	if _, err := exec.LookPath("ip6tables-save"); err == nil {
		out += e.tp.Node.MustRun(t, "ip6tables-save")
	}
	return out
}

func (e *env) nftTablePresent(t *testing.T) bool {
	t.Helper()
	for _, line := range strings.Split(e.tp.Node.MustRun(t, "nft", "list", "tables"), "\n") {
		if strings.TrimSpace(line) == "table inet kproxy" {
			return true
		}
	}
	return false
}

// waitRules polls the kernel rules (every 50 ms, at most 10 s) until they
// mention every string of present and none of absent.
func (e *env) waitRules(t *testing.T, present, absent []string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for i := 0; ; i++ {
		rules := e.rules(t)
		var missing, extra []string
		for _, s := range present {
			if !strings.Contains(rules, s) {
				missing = append(missing, s)
			}
		}
		for _, s := range absent {
			if strings.Contains(rules, s) {
				extra = append(extra, s)
			}
		}
		if len(missing) == 0 && len(extra) == 0 {
			t.Logf("%s rules in place after %v", e.mode, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) || i > 500 {
			t.Fatalf("%s rules after 10s: missing %v, still there %v:\n%s", e.mode, missing, extra, rules)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
