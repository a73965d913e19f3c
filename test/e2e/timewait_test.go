//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

const twClusterIP = "198.18.0.73"

// testTimeWaitReuse: a client that connects again from the same port
// while kproxy's side of its last connection is in TIME_WAIT is served.
// The endpoint closes first, so kproxy's accepted socket closes first
// and waits in TIME_WAIT (60 s) under the client's address and port,
// while the client's side is gone at once. Clients reuse such ports (the
// kernel picks a free local port, and only the client's side counts);
// the kernel takes a new SYN on a TIME_WAIT pair as a new connection for
// the listener. The socket lookup that checks a proxy port's owner then
// finds the TIME_WAIT socket, which carries no mark: the check must not
// take it for another process's socket and drop the SYN (each of its
// retransmissions too, until the client gives up).
func testTimeWaitReuse(t *testing.T, bin, mode string) {
	e := newEnv(t, bin, mode)
	e.noFaults = true // the event loops, as the DaemonSet runs
	endpoint := e.be.IPs4[0]
	servePod(t, e.be.Netns, endpoint)
	e.replaceManifest(t, podServiceManifest("tw", twClusterIP, endpoint, "node"))
	e.start(t)
	e.waitRules(t, []string{twClusterIP}, nil)

	svc := svcAddr(twClusterIP, 80)
	const rounds = 3
	for i := range rounds {
		port := 41000 + uint16(i)
		for j, what := range []string{"first", "again, the pair in TIME_WAIT on the node"} {
			got, err := askPeerFromPort(e.tp.Client, port, svc, 3*time.Second)
			if err != nil || !got.IsValid() {
				t.Fatalf("round %d, from port %d, %s: no answer: %v", i, port, what, err)
			}
			if j == 0 {
				waitTimeWait(t, e, port)
			}
		}
	}
}

// askPeerFromPort is askPeerWithin from the client's port port. The
// port's last connection may still be closing on the client's side
// (LAST_ACK until kproxy's ACK): the bind is tried again until it is
// free, within the deadline.
func askPeerFromPort(ns *netnstest.Netns, port uint16, svc netip.AddrPort, within time.Duration) (netip.Addr, error) {
	deadline := time.Now().Add(within)
	for {
		var c net.Conn
		err := ns.Do(func() (err error) {
			d := net.Dialer{Timeout: time.Until(deadline), LocalAddr: &net.TCPAddr{Port: int(port)}}
			c, err = d.Dial("tcp", svc.String())
			return err
		})
		if errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling: the kernel announces no port's release
			continue
		}
		if err != nil {
			return netip.Addr{}, err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return netip.Addr{}, err
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("read answer: %w", err)
		}
		addr, err := netip.ParseAddr(strings.TrimSpace(string(buf[:n])))
		// Read to the end: the client closes last, as the test wants.
		for err == nil {
			_, rerr := c.Read(buf)
			if rerr != nil {
				break
			}
		}
		return addr, err
	}
}

// waitTimeWait waits until the node holds a TIME_WAIT socket whose peer
// is the client's port (the client's FIN, sent at its close, is on its
// way), or fails the test: without it the test would not test what it
// says.
func waitTimeWait(t *testing.T, e *env, port uint16) {
	t.Helper()
	peer := fmt.Sprintf("%s:%d", netnstest.ClientIP4, port)
	mapped := fmt.Sprintf("[::ffff:%s]:%d", netnstest.ClientIP4, port) // the listener is dual-stack
	var out string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		out = e.tp.Node.MustRun(t, "ss", "-Htn", "state", "time-wait")
		if strings.Contains(out, " "+peer) || strings.Contains(out, mapped) {
			return
		}
		time.Sleep(10 * time.Millisecond) // polling: ss cannot wait for a state
	}
	t.Fatalf("no TIME_WAIT socket on the node with peer %s; the node's TIME_WAIT sockets:\n%s", peer, out)
}
