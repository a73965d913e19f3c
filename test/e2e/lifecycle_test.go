//go:build linux

package e2e

// How kproxy's kernel rules outlive it: SIGTERM and SIGKILL leave them
// (as kube-proxy does: the next process takes them over), the next start
// replaces them, and kproxy cleanup removes them.

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// checkNftablesSIGTERM stops p with SIGTERM: it exits 0 and leaves its
// table for the next process; kproxy cleanup removes it.
func (e *env) checkNftablesSIGTERM(t *testing.T, p *proc) {
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("kproxy exited with %d after SIGTERM, want 0", code)
	}
	if !e.nftTablePresent(t) {
		t.Fatal("SIGTERM removed table inet kproxy (want it left for the next kproxy)")
	}
	if out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "nftables"); err != nil {
		t.Fatalf("kproxy cleanup --portal nftables: %v: %s", err, out)
	}
	if e.nftTablePresent(t) {
		t.Errorf("table inet kproxy left after kproxy cleanup:\n%s", e.rules(t))
	}
}

// checkNftablesSIGKILLRestart: a crashed kproxy (SIGKILL) leaves its rules;
// the next start replaces them: e2e/gone's rules (stale: it is not in the
// manifest any more) disappear, and the new rules point at the new proxy
// ports. kproxy cleanup after another SIGKILL removes the table.
func (e *env) checkNftablesSIGKILLRestart(t *testing.T) {
	e.writeManifest(t, true)
	p1 := e.start(t)
	before := e.waitReady(t, p1, servicePorts(true))
	e.waitRules(t, []string{webCluster4, gone4}, nil)
	p1.stop(t, syscall.SIGKILL)
	if !e.nftTablePresent(t) || !strings.Contains(e.rules(t), gone4) {
		t.Fatalf("SIGKILL removed the rules (want them left behind):\n%s", e.rules(t))
	}
	e.writeManifest(t, false)
	p2 := e.start(t)
	after := e.waitReady(t, p2, servicePorts(false))
	// Stale: e2e/gone's IP, and the old proxy ports (map elements
	// "... : PORT," or "... : PORT }") unless the new run reuses one.
	stale := []string{gone4}
	for _, sp := range servicePorts(true) {
		old, reused := before[sp].ProxyPort, false
		for _, s := range after {
			reused = reused || s.ProxyPort == old
		}
		if !reused {
			stale = append(stale, fmt.Sprintf(": %d,", old), fmt.Sprintf(": %d }", old))
		}
	}
	e.waitRules(t, []string{webCluster4, webCluster6, empty4}, stale)
	t.Logf("proxy ports: %s %d -> %d, %s %d -> %d", spWebTCP, before[spWebTCP].ProxyPort, after[spWebTCP].ProxyPort,
		spWebUDP, before[spWebUDP].ProxyPort, after[spWebUDP].ProxyPort)
	for _, proto := range []string{"tcp", "udp"} {
		e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster4, webPort(proto)))
		e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster6, webPort(proto)))
		e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(webNodePort(proto))))
		e.expectBackend(t, e.tp.Node, proto, svcAddr(webCluster4, webPort(proto)))
	}
	netnstest.ExpectRefused(t, e.tp.Client, "tcp", svcAddr(empty4, webTCP))
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(gone4, goneTCP))

	// kproxy cleanup after another SIGKILL removes the table.
	p2.stop(t, syscall.SIGKILL)
	if !e.nftTablePresent(t) {
		t.Fatal("SIGKILL removed the table (want it left behind)")
	}
	out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "nftables")
	if err != nil {
		t.Fatalf("kproxy cleanup --portal nftables: %v", err)
	}
	t.Logf("kproxy cleanup --portal nftables: %s", strings.TrimSpace(out))
	if e.nftTablePresent(t) {
		t.Errorf("table inet kproxy left after kproxy cleanup --portal nftables:\n%s", e.rules(t))
	}
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(webCluster4, webTCP))
}

// checkIPTablesSIGKILLCleanup kills p: its chains stay, and kproxy cleanup
// removes them.
func (e *env) checkIPTablesSIGKILLCleanup(t *testing.T, p *proc) {
	p.stop(t, syscall.SIGKILL)
	if rules := e.rules(t); !strings.Contains(rules, "KUBE-PORTALS-") {
		t.Fatalf("SIGKILL removed the chains (want them left behind):\n%s", rules)
	}
	out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "iptables")
	if err != nil {
		t.Fatalf("kproxy cleanup --portal iptables: %v", err)
	}
	t.Logf("kproxy cleanup --portal iptables: %s", strings.TrimSpace(out))
	if rules := e.rules(t); strings.Contains(rules, "KUBE-PORTALS-") || strings.Contains(rules, "KUBE-NODEPORT-") {
		t.Errorf("chains left after kproxy cleanup --portal iptables:\n%s", rules)
	}
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(webCluster4, webTCP))
}

// checkIPTablesSIGTERM starts kproxy again, waits for the rules in want,
// and stops it with SIGTERM: it exits 0 and leaves its chains; kproxy
// cleanup removes them.
func (e *env) checkIPTablesSIGTERM(t *testing.T, want []string) {
	p := e.start(t)
	e.waitReady(t, p, servicePorts(true))
	e.waitRules(t, want, nil)
	e.expectBackend(t, e.tp.Client, "tcp", svcAddr(webCluster4, webTCP))
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("kproxy exited with %d after SIGTERM, want 0", code)
	}
	if rules := e.rules(t); !strings.Contains(rules, "KUBE-PORTALS-") {
		t.Fatalf("SIGTERM removed the chains (want them left for the next kproxy):\n%s", rules)
	}
	if out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "iptables"); err != nil {
		t.Fatalf("kproxy cleanup --portal iptables: %v: %s", err, out)
	}
	if rules := e.rules(t); strings.Contains(rules, "KUBE-PORTALS-") || strings.Contains(rules, "KUBE-NODEPORT-") {
		t.Errorf("chains left after kproxy cleanup:\n%s", rules)
	}
}
