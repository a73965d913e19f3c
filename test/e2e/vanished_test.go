//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/netnstest"
)

// testVanishedClient: a client host disappears (its namespace deleted,
// so no FIN ever comes) while its connection through kproxy is idle.
// kproxy's keepalive towards clients notices, and the connection (and its
// backend side) is reclaimed long before the idle timeout.
func testVanishedClient(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	gone := netnstest.New(t, "gone")
	netnstest.Veth(t, gone, "kg0", e.tp.Node, "kn9")
	gone.AddAddr(t, "kg0", "2001:db8:9::2/64")
	e.tp.Node.AddAddr(t, "kn9", "2001:db8:9::1/64")
	gone.MustRun(t, "ip", "-6", "route", "add", netnstest.ServiceRange6, "via", "2001:db8:9::1")

	p := e.start(t, "--tcp-keepalive", "2s")
	e.waitReady(t, p, servicePorts(true))
	e.waitRules(t, []string{webCluster6}, nil)

	var c net.Conn
	gone.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp", svcAddr(webCluster6, webTCP).String(), 3*time.Second)
		return err
	})
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := backends.ReadName(bufio.NewReader(c)); err != nil {
		t.Fatalf("the client's connection: %v", err)
	}
	if n := e.activeConns(t); n != 1 {
		t.Fatalf("kproxy holds %d connections of %s, want 1", n, spWebTCP)
	}

	// The host vanishes: its link goes first, so the FIN of its closing
	// socket reaches nobody (a socket kept open would keep the namespace
	// alive), then the namespace.
	e.tp.Node.MustRun(t, "ip", "link", "del", "kn9")
	c.Close()
	gone.Delete(t)
	start := time.Now()
	for e.activeConns(t) != 0 {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the vanished client's connection is still held after %v (keepalive 2 s)", time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the vanished client's connection reclaimed %v after the host went", time.Since(start).Round(100*time.Millisecond))
}

// activeConns reads kproxy_service_port_connections_active of e2e/web's
// TCP port from /metrics inside the node.
func (e *env) activeConns(t *testing.T) int {
	t.Helper()
	resp, err := e.tp.Node.HTTPClient(2 * time.Second).Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	prefix := fmt.Sprintf("kproxy_service_port_connections_active{service_port=%q} ", spWebTCP)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return -1
}
