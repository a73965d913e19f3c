//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// testAutoPortal: --portal auto takes the first kernel portal that works
// and never falls back to bind, whose listeners on service IPs that are
// not the node's addresses could never bind. Without nft it takes
// iptables, and service IPs answer; with neither nft nor iptables, or
// without the permission to use them, the start fails at once naming
// each mode's cause.
func testAutoPortal(t *testing.T, bin string) {
	t.Run("IPTablesWithoutNft", func(t *testing.T) {
		e := newEnv(t, bin, "auto")
		e.path = pathWith(t, "iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore")
		p := e.start(t)
		waitLogged(t, p, `"portal":"iptables"`)
		e.waitReady(t, p, servicePorts(true))
		e.waitRules(t, []string{webCluster4 + "/32"}, nil)
		for _, proto := range []string{"tcp", "udp"} {
			e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster4, webPort(proto)))
		}
		if n := countIn(p.Log, "nft (package nftables) not installed or not in $PATH", "--portal auto: using iptables"); n != 1 {
			t.Errorf("the missing nft was logged %d times with the mode taken instead, want once:\n%s", n, binarytest.Tail(p.Log, 20))
		}
	})
	t.Run("NoKernelPortal", func(t *testing.T) {
		e := newEnv(t, bin, "auto")
		e.path = pathWith(t) // neither nft nor the iptables tools
		p := e.start(t)
		out := waitFailedStart(t, p)
		for _, cause := range []string{
			"no kernel portal works on this node",
			"nftables: nft (package nftables) not installed or not in $PATH",
			"iptables: iptables-save and iptables-restore (package iptables) not installed or not in $PATH",
		} {
			if !strings.Contains(out, cause) {
				t.Errorf("the failed start does not say %q:\n%s", cause, out)
			}
		}
	})
	t.Run("NoPermission", func(t *testing.T) {
		e := newEnv(t, bin, "auto")
		// Root without CAP_NET_ADMIN: nft and iptables are refused.
		e.wrap = []string{"setpriv", "--inh-caps=-all", "--bounding-set=-net_admin"}
		p := e.start(t)
		out := waitFailedStart(t, p)
		for _, cause := range []string{
			"nftables: no permission: the process lacks CAP_NET_ADMIN",
			"iptables: no permission: the process lacks CAP_NET_ADMIN",
		} {
			if !strings.Contains(out, cause) {
				t.Errorf("the failed start does not say %q:\n%s", cause, out)
			}
		}
	})
}

// pathWith is a $PATH directory holding only the named tools (those
// installed here).
func pathWith(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		real, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if err := os.Symlink(real, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitFailedStart waits (at most 15 s) for kproxy to exit, wants a
// failure with nothing served, and returns its output.
func waitFailedStart(t *testing.T, p *proc) string {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("kproxy still runs 15 s after its start, want a failed start:\n%s", binarytest.Tail(p.Log, 20))
	}
	raw, _ := os.ReadFile(p.Log)
	out := string(raw)
	if code := p.Cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("kproxy exited 0, want a failure:\n%s", out)
	}
	if strings.Contains(out, "service port listening") {
		t.Errorf("kproxy served before failing:\n%s", out)
	}
	t.Logf("the failed start says:\n%s", binarytest.Tail(p.Log, 3))
	return out
}
