//go:build linux

package e2e

import (
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// checkDeleteService removes e2e/gone from the manifest while p runs: its
// service ports and rules go, and nothing answers on its address any more,
// while the other services are untouched.
func (e *env) checkDeleteService(t *testing.T, p *proc) {
	e.writeManifest(t, false)
	e.waitState(t, p, "e2e/gone deleted", func(st map[string]spState) bool {
		_, tcp := st[spGoneTCP]
		_, udp := st[spGoneUDP]
		return !tcp && !udp
	})
	e.waitRules(t, []string{webCluster4, empty4}, []string{gone4})
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(gone4, goneTCP))
	e.expectNoBackend(t, e.tp.Client, "udp", svcAddr(gone4, goneUDP))
	e.expectNoBackend(t, e.tp.Node, "tcp", svcAddr(gone4, goneTCP))
	// The others are untouched.
	e.expectBackend(t, e.tp.Client, "tcp", svcAddr(webCluster4, webTCP))
	e.expectBackend(t, e.tp.Client, "udp", svcAddr(webCluster6, webUDP))
	netnstest.ExpectRefused(t, e.tp.Client, "tcp", svcAddr(empty4, webTCP))
}
