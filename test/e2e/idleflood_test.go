//go:build linux

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
)

// TestTCPIdleFloodBounded: 15,000 idle TCP connections against one
// service port of the real binary. It holds at most its per-service-port
// bound (resetting the rest at once), an unrelated service loses no
// request meanwhile, and the idle connections it holds are closed after
// --tcp-idle-timeout.
func TestTCPIdleFloodBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15,000-connection flood")
	}
	bin := binarytest.Build(t)
	dir := t.TempDir()
	for _, b := range []struct{ name, addr string }{{"idle", "127.0.41.11:8080"}, {"steady", "127.0.41.12:8080"}} {
		be, err := backends.StartTCP(b.name, b.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(be.Close)
	}
	manifest := filepath.Join(dir, "services.yaml")
	var b strings.Builder
	for _, s := range []struct{ name, ip, ep string }{{"idle", "127.0.41.1", "127.0.41.11"}, {"steady", "127.0.41.2", "127.0.41.12"}} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: idle}
spec:
  clusterIP: %[2]s
  ports: [{name: p, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: idle, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: p, port: 8080}]
endpoints: [{addresses: [%[3]s], conditions: {ready: true}}]
`, s.name, s.ip, s.ep)
	}
	if err := os.WriteFile(manifest, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const bound, idleTimeout = 1000, 4 * time.Second
	pid := loopbackKproxy(t, bin, manifest, "--max-connections-per-service-port", fmt.Sprint(bound), "--tcp-idle-timeout", idleTimeout.String())
	deadline := time.Now().Add(15 * time.Second)
	for tcpOK("127.0.41.1:80") != nil || tcpOK("127.0.41.2:80") != nil {
		if time.Now().After(deadline) {
			t.Fatal("kproxy never served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fds0, _ := procStats(pid)

	checks := startChecks(func() error { return tcpOK("127.0.41.2:80") })

	// 15,000 connections that send nothing; the held ones stay open here.
	const flood = 15000
	var held []net.Conn
	start := time.Now()
	maxFDs := fds0
	for i := range flood {
		c, err := net.DialTimeout("tcp", "127.0.41.1:80", 2*time.Second)
		if err != nil {
			continue
		}
		held = append(held, c)
		if i%1000 == 999 {
			fds, _ := procStats(pid)
			maxFDs = max(maxFDs, fds)
			// Drop the ones kproxy reset (over its bound): a test
			// process has an fd limit too.
			held = dropReset(held)
		}
	}
	// The last connections may still wait in the accept queue, where
	// kproxy has not reset them yet: drop the reset ones until a pass
	// finds no more (the queue drained), or the bound is exceeded for good.
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := len(held)
		held = dropReset(held)
		if len(held) == n && len(held) <= bound || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the accept queue drains on its own: no event to await
	}
	t.Logf("%d connections opened in %v; %d held by kproxy; its fds %d -> max %d",
		flood, time.Since(start).Round(time.Millisecond), len(held), fds0, maxFDs)
	if len(held) > bound {
		t.Errorf("kproxy holds %d connections of one service port, bound %d", len(held), bound)
	}
	// Idle connections hold their two sockets and nothing else (no splice
	// pipe while the copy waits).
	if maxFDs > fds0+2*bound+100 {
		t.Errorf("fds reached %d (%d before), over the bound's", maxFDs, fds0)
	}

	// The held connections are idle: kproxy closes them after the timeout.
	closed := make(chan time.Duration, len(held))
	for _, c := range held {
		go func() {
			c.SetReadDeadline(time.Now().Add(idleTimeout + 10*time.Second))
			_, err := c.Read(make([]byte, 64))
			if err != nil && !os.IsTimeout(err) {
				closed <- time.Since(start)
			} else {
				closed <- 0
			}
			c.Close()
		}()
	}
	var early, late int
	for range held {
		switch d := <-closed; {
		case d == 0:
			late++
		case d < idleTimeout-time.Second:
			early++
		}
	}
	nChecks, failures, firstErr := checks.Stop()
	t.Logf("idle connections closed by kproxy: %d of %d (%d never, %d before the timeout); unrelated service: %d checks, %d failures",
		len(held)-late, len(held), late, early, nChecks, failures)
	if late > 0 {
		t.Errorf("%d idle connections were not closed within 10 s after the %v idle timeout", late, idleTimeout)
	}
	if failures > 0 {
		t.Errorf("the unrelated service failed %d of %d checks (first: %v)", failures, nChecks, firstErr)
	}
}

// dropReset closes and drops the connections kproxy has reset or closed;
// the others (the backend's greeting read, or nothing yet) are kept.
func dropReset(cs []net.Conn) []net.Conn {
	out := cs[:0]
	buf := make([]byte, 64)
	for _, c := range cs {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(buf); err == nil || os.IsTimeout(err) {
			c.SetReadDeadline(time.Time{})
			out = append(out, c)
			continue
		}
		c.Close()
	}
	return out
}
