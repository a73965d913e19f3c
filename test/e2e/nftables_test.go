//go:build linux

package e2e

import "testing"

// testNftables is the full matrix with --portal nftables, then a portal
// crash, a deleted service, a SIGTERM shutdown, and a SIGKILL with a
// restart and kproxy cleanup.
func testNftables(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	p := e.start(t)
	e.waitReady(t, p, servicePorts(true))
	e.waitRules(t, []string{webCluster4, webExternal4, webLB4, webCluster6, webExternal6, webLB6, empty4, empty6, gone4}, nil)
	t.Logf("nft list table inet kproxy:\n%s", e.rules(t))

	t.Run("Matrix", func(t *testing.T) {
		e.checkMatrix(t, true)
		e.checkNodePortsOnLoopback(t)
		e.expectBackend(t, e.tp.Client, "tcp", svcAddr(gone4, goneTCP))
		e.expectBackend(t, e.tp.Client, "udp", svcAddr(gone4, goneUDP))
		e.checkSpread(t)
	})

	t.Run("PortalCrash", func(t *testing.T) { e.checkCrash(t) })

	t.Run("DeleteService", func(t *testing.T) { e.checkDeleteService(t, p) })

	t.Run("SIGTERM", func(t *testing.T) { e.checkNftablesSIGTERM(t, p) })

	t.Run("SIGKILLRestart", func(t *testing.T) { e.checkNftablesSIGKILLRestart(t) })
}
