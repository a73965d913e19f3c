//go:build linux

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/test/binarytest"
)

// onlyNetAdmin runs kproxy as root with every capability but CAP_NET_ADMIN
// dropped, as deploy/daemonset.yaml's securityContext grants it: the
// kernel portals, conntrack clearing and a hand-over need nothing else.
var onlyNetAdmin = []string{"setpriv", "--inh-caps=-all", "--bounding-set=-all,+net_admin"}

// testLeastPrivilege: with only CAP_NET_ADMIN, mode's portal serves TCP
// and UDP through a cluster IP, and the process holds no other
// capability; with none, the start fails naming CAP_NET_ADMIN.
func testLeastPrivilege(t *testing.T, bin, mode string) {
	t.Run("OnlyNetAdmin", func(t *testing.T) {
		e := newEnv(t, bin, mode)
		e.wrap = onlyNetAdmin
		p := e.start(t)
		e.waitReady(t, p, servicePorts(true))
		present := webCluster4
		if mode == "iptables" {
			present += "/32"
		}
		e.waitRules(t, []string{present}, nil)
		for _, proto := range []string{"tcp", "udp"} {
			e.expectBackend(t, e.tp.Client, proto, svcAddr(webCluster4, webPort(proto)))
		}
		// setpriv execs kproxy: the same process.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "CapEff:\t0000000000001000\n") {
			t.Errorf("kproxy's capabilities are not CAP_NET_ADMIN alone:\n%s", capLines(string(status)))
		}
	})
	t.Run("WithoutNetAdmin", func(t *testing.T) {
		e := newEnv(t, bin, mode)
		e.wrap = []string{"setpriv", "--inh-caps=-all", "--bounding-set=-all"}
		p := e.start(t)
		if want := "--portal " + mode + " needs CAP_NET_ADMIN"; !strings.Contains(waitFailedStart(t, p), want) {
			t.Errorf("the failed start does not say %q:\n%s", want, binarytest.Tail(p.Log, 5))
		}
	})
}

func capLines(status string) string {
	var out []string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "Cap") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
