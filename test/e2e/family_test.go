//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

// testIPTablesWithoutIP6tables: a node with iptables but no ip6tables. The
// dual-stack services' IPv6 rules are left out, and only they: IPv4-only
// services and the IPv4 side of dual-stack ones work through cluster IPs
// and node ports; the missing family is logged once, not on every resync.
func testIPTablesWithoutIP6tables(t *testing.T, bin string) {
	e := newEnv(t, bin, "iptables")
	// kproxy's PATH: iptables and nothing else of the xtables tools.
	e.path = t.TempDir()
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore"} {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, filepath.Join(e.path, name)); err != nil {
			t.Fatal(err)
		}
	}
	p := e.start(t)
	e.waitReady(t, p, servicePorts(true))
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(e.tp.Node.MustRun(t, "iptables-save"), webCluster4+"/32") {
		if time.Now().After(deadline) {
			t.Fatal("no IPv4 portal rules")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v6 := e.tp.Node.MustRun(t, "ip6tables-save"); strings.Contains(v6, "KUBE-PORTALS") {
		t.Fatalf("IPv6 rules programmed without ip6tables in kproxy's PATH:\n%s", v6)
	}

	for _, proto := range []string{"tcp", "udp"} {
		e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster4, webPort(proto)))                                  // dual-stack, v4 side
		e.expectBackend(t, e.tp.Client, proto, svcAddr(gone4, map[string]int{"tcp": goneTCP, "udp": goneUDP}[proto])) // v4 only
		e.expectBackend(t, e.tp.Client, proto, svcAddr(netnstest.NodeIP4.String(), webNodePort(proto)))               // node port
	}
	netnstest.ExpectRefused(t, e.tp.Client, "tcp", svcAddr(empty4, webTCP))
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(webCluster6, webTCP)) // no rule: not redirected

	// Resyncs (a rules fault forces full syncs) do not log it again.
	e.admin(t, "/rules-fault", map[string]string{"duration": "1s"})
	deadline = time.Now().Add(15 * time.Second)
	// Wait for the full sync that follows the fault (the first was at start).
	for countIn(p.Log, "programming kernel portal rules failed") == 0 || countIn(p.Log, `"fullSync":true`, "kernel portal rules programmed") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no failed transaction and full resync after the rules fault")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := countIn(p.Log, "portal rules of an IP family this node cannot program are left out"); n != 1 {
		t.Errorf("the missing IPv6 family was logged %d times, want once", n)
	}
}

// countIn counts the lines of a file that contain every one of subs.
func countIn(path string, subs ...string) int {
	raw, _ := os.ReadFile(path)
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}
