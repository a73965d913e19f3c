//go:build linux

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
)

// TestUDPFloodBounded: 20,000 UDP clients (distinct source ports, 1,500 a
// second, spoofable in the wild) against one service port of the real
// binary. Its fds stay within the flow bound, its memory does not grow
// with the flows, the memory returns once they expire, and another TCP
// and another UDP service lose no request meanwhile.
func TestUDPFloodBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20,000-client flood")
	}
	bin := binarytest.Build(t)
	dir := t.TempDir()
	for _, b := range []struct{ name, addr string }{{"dns", "127.0.40.11:5353"}, {"steady-dns", "127.0.40.13:5353"}} {
		u, err := backends.StartUDP(b.name, b.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(u.Close)
	}
	web, err := backends.StartTCP("web", "127.0.40.12:8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(web.Close)
	manifest := filepath.Join(dir, "services.yaml")
	var b strings.Builder
	for _, s := range []struct {
		name, ip, proto, ep string
		port, target        int
	}{
		{"flood", "127.0.40.1", "UDP", "127.0.40.11", 53, 5353},
		{"steady", "127.0.40.2", "TCP", "127.0.40.12", 80, 8080},
		{"steady-dns", "127.0.40.3", "UDP", "127.0.40.13", 53, 5353},
	} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: flood}
spec:
  clusterIP: %[2]s
  ports: [{name: p, protocol: %[3]s, port: %[5]d, targetPort: %[6]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: flood, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: p, protocol: %[3]s, port: %[6]d}]
endpoints: [{addresses: [%[4]s], conditions: {ready: true}}]
`, s.name, s.ip, s.proto, s.ep, s.port, s.target)
	}
	if err := os.WriteFile(manifest, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const flowBound = 2000
	pid := loopbackKproxy(t, bin, manifest, "--udp-idle-timeout", "5s", "--max-udp-flows-per-service-port", strconv.Itoa(flowBound))

	// Wait until all three serve.
	deadline := time.Now().Add(15 * time.Second)
	for tcpOK("127.0.40.2:80") != nil || udpOK("127.0.40.3:53") != nil || udpOK("127.0.40.1:53") != nil {
		if time.Now().After(deadline) {
			t.Fatal("kproxy never served the three services")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fds0, rss0 := procStats(pid)

	// Checks on the other services, every 50 ms while the flood runs.
	checks := startChecks(func() error { return tcpOK("127.0.40.2:80") }, func() error { return udpOK("127.0.40.3:53") })

	// The flood: each datagram from a fresh socket, so a new source port.
	const clients, perSecond = 20000, 1500
	maxFDs, maxRSS := fds0, rss0
	start := time.Now()
	target, _ := net.ResolveUDPAddr("udp", "127.0.40.1:53")
	for i := range clients {
		if c, err := net.DialUDP("udp", nil, target); err == nil {
			c.Write([]byte("flood"))
			c.Close()
		}
		if i%500 == 0 {
			fds, rss := procStats(pid)
			maxFDs, maxRSS = max(maxFDs, fds), max(maxRSS, rss)
			if ahead := time.Duration(i)*time.Second/perSecond - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
	floodTime := time.Since(start)
	nChecks, failures, firstErr := checks.Stop()
	fds1, rss1 := procStats(pid)
	maxFDs, maxRSS = max(maxFDs, fds1), max(maxRSS, rss1)
	t.Logf("flood of %d clients in %v: fds %d -> max %d, RSS %d -> max %d KiB; other services: %d checks, %d failures",
		clients, floodTime.Round(time.Millisecond), fds0, maxFDs, rss0, maxRSS, nChecks, failures)
	if failures > 0 {
		t.Errorf("other services failed %d of %d checks during the flood (first: %v)", failures, nChecks, firstErr)
	}
	// The checks' own UDP clients hold up to ~100 flows of steady-dns.
	if maxFDs > fds0+flowBound+150 {
		t.Errorf("fds reached %d: more than the %d-flow bound above the %d before", maxFDs, flowBound, fds0)
	}
	if maxRSS > rss0+64*1024 {
		t.Errorf("RSS grew by %d KiB during the flood, want under 64 MiB", maxRSS-rss0)
	}

	// Flows expire after 5 s idle; fds and memory come back within a minute.
	deadline = time.Now().Add(time.Minute)
	for {
		fds, rss := procStats(pid)
		if fds <= fds0+10 && rss <= rss0+16*1024 {
			t.Logf("back to fds %d, RSS %d KiB after %v", fds, rss, time.Since(start.Add(floodTime)).Round(time.Second))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the flood: fds %d (before %d), RSS %d KiB (before %d)", fds, fds0, rss, rss0)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
