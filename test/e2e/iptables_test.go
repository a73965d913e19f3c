//go:build linux

package e2e

import (
	"os/exec"
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// testIPTables is the core matrix with --portal iptables, node ports
// restricted by --nodeport-addresses, then kproxy cleanup after a SIGKILL,
// then a SIGTERM shutdown.
func testIPTables(t *testing.T, bin string) {
	e := newEnv(t, bin, "iptables")
	_, err6 := exec.LookPath("ip6tables-restore")
	v6 := err6 == nil
	p := e.start(t, "--nodeport-addresses", "192.0.2.0/24,2001:db8::/64")
	e.waitReady(t, p, servicePorts(true))
	want := []string{webCluster4 + "/32", empty4 + "/32", gone4 + "/32"}
	if v6 {
		want = append(want, webCluster6+"/128")
	}
	e.waitRules(t, want, nil)
	t.Logf("iptables-save; ip6tables-save:\n%s", e.rules(t))

	t.Run("Matrix", func(t *testing.T) {
		e.checkMatrix(t, false)
		if v6 {
			for _, proto := range []string{"tcp", "udp"} {
				e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster6, webPort(proto)))
				e.expectBackend(t, e.tp.Node, proto, svcAddr(webCluster6, webPort(proto)))
			}
			netnstest.ExpectRefused(t, e.tp.Client, "tcp", svcAddr(empty6, webTCP))
		}
		e.checkNodePortAddresses(t)
		e.checkSpread(t)
	})

	t.Run("SIGKILLCleanup", func(t *testing.T) { e.checkIPTablesSIGKILLCleanup(t, p) })

	t.Run("SIGTERM", func(t *testing.T) { e.checkIPTablesSIGTERM(t, want) })
}
