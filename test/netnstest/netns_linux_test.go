//go:build linux

package netnstest

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExecInheritsThread checks the harness's premise: a process started
// from a goroutine locked to a thread in a namespace runs in that
// namespace, and others do not.
func TestExecInheritsThread(t *testing.T) {
	t.Parallel()
	ns := New(t, "exec")
	var fi syscall.Stat_t
	if err := syscall.Stat(ns.Path(), &fi); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]", fi.Ino)
	var inside string
	ns.MustDo(t, func() error {
		out, err := exec.CommandContext(context.Background(), "readlink", "/proc/self/ns/net").Output()
		inside = strings.TrimSpace(string(out))
		return err
	})
	if inside != want {
		t.Errorf("child of the locked thread is in %s, want %s", inside, want)
	}
	if out := strings.TrimSpace(ns.MustRun(t, "readlink", "/proc/self/ns/net")); out != want {
		t.Errorf("Run's command is in %s, want %s", out, want)
	}
	out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	if outside := strings.TrimSpace(string(out)); outside == want {
		t.Errorf("child of another goroutine is in the test namespace %s", outside)
	}
}

// TestTopology checks the links and routes: client and node see each other
// over both families, the node sees its backends, the client does not, and
// echo servers answer; a closed port is refused.
func TestTopology(t *testing.T) {
	t.Parallel()
	tp := NewTopology(t)
	b0 := tp.AddBackend(t, 2)
	b1 := tp.AddBackend(t, 1)
	StartEcho(t, tp.Node, 18000, true)
	StartEcho(t, b0.Netns, 18001, true) // two addresses: answer from the one asked
	StartEcho(t, b1.Netns, 18002, false)
	for _, proto := range []string{"tcp", "udp"} {
		ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(NodeIP4, 18000), 18000)
		ExpectEcho(t, tp.Client, proto, netip.AddrPortFrom(NodeIP6, 18000), 18000)
		for _, ip := range append(append([]netip.Addr{}, b0.IPs4...), b0.IPs6...) {
			ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(ip, 18001), 18001)
		}
		ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(b1.IPs4[0], 18002), 18002)
		ExpectEcho(t, tp.Node, proto, netip.AddrPortFrom(b1.IPs6[0], 18002), 18002)
		ExpectRefused(t, tp.Client, proto, netip.AddrPortFrom(NodeIP4, 18009))
	}
	if b0.IPs4[1] != netip.MustParseAddr("198.51.100.3") || b1.IPs4[0] != netip.MustParseAddr("198.51.100.66") || b1.IPs6[0] != netip.MustParseAddr("2001:db8:1:1::2") {
		t.Errorf("backend addresses %v %v %v", b0.IPs4, b1.IPs4, b1.IPs6)
	}
	if _, err := Ask(tp.Client, "tcp", netip.AddrPortFrom(b0.IPs4[0], 18001), 500*time.Millisecond); err == nil {
		t.Error("the client reaches a backend directly")
	}
	// DialContext dials inside the namespace: the node's loopback, not ours.
	c, err := tp.Node.DialContext(context.Background(), "tcp", "127.0.0.1:18000")
	if err != nil {
		t.Fatalf("DialContext to the node's echo server: %v", err)
	}
	c.Close()
}
