//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// testKPNGExample runs examples/kpng-example as its README says: the node
// runs `kproxy watch --callout all-ip.sh` for the named proxier, and the
// script's nftables rules send all traffic for the external IPs to the
// local endpoint, whatever the port.
func testKPNGExample(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	if e.be.IPs4[0].String() != "198.51.100.2" || e.be.IPs6[0].String() != "2001:db8:1::2" {
		t.Fatalf("the example's endpoints are 198.51.100.2 and 2001:db8:1::2; this topology's backend has %s and %s", e.be.IPs4[0], e.be.IPs6[0])
	}
	// DNAT keeps the client's address: the backend answers it through the
	// node, as pods answer through their node in a cluster.
	e.be.MustRun(t, "ip", "route", "replace", "192.0.2.0/24", "via", e.be.NodeIP4.String())
	e.be.MustRun(t, "ip", "-6", "route", "replace", "2001:db8::/64", "via", e.be.NodeIP6.String())
	example, err := filepath.Abs("../../examples/kpng-example")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logf, err := os.Create(filepath.Join(e.dir, "watch.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.tp.Node.Command(ctx, e.bin, "watch", "--source", "file:"+filepath.Join(example, "services.yaml"),
		"--service-proxy-name", "kpng-example", "--node-name", "node", "--callout", filepath.Join(example, "all-ip.sh"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("kproxy watch --callout output:\n%s", binarytest.Tail(logf.Name(), 30))
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := e.tp.Node.Run("nft", "list", "table", "inet", "kpng_all_ip")
		if strings.Count(out, "dnat") == 2 {
			t.Logf("all-ip.sh programmed:\n%s", out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("all-ip.sh never programmed its two rules; table now:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, ext := range []string{"198.18.3.55", "2001:db8:5::3:55"} {
		for _, proto := range []string{"tcp", "udp"} {
			port := backendTCP
			if proto == "udp" {
				port = backendUDP
			}
			e.expectBackend(t, e.tp.Client, proto, svcAddr(ext, port))
		}
	}
	for _, want := range []string{"198.51.100.2", "2001:db8:1::2"} {
		if !e.seen[want] {
			t.Errorf("the local endpoint %s was not reached (reached %v)", want, e.seen)
		}
	}
}
