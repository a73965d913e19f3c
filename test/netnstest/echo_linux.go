//go:build linux

package netnstest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kproxy/kproxy/portal/steer"
)

// EchoServers answer on one port, TCP and UDP, IPv4 and IPv6 (dual-stack
// wildcard sockets), with EchoReply(port): over TCP at once on accept, then
// they close; over UDP to every datagram.
type EchoServers struct {
	Port int
	tcp  net.Listener
	udp  *net.UDPConn
	wg   sync.WaitGroup
}

// EchoReply is what the echo servers on port answer.
func EchoReply(port int) string { return "pp=" + strconv.Itoa(port) }

// StartEcho starts echo servers on [::]:port inside ns, stopped at cleanup.
// With pktinfo, the UDP socket answers from the address each datagram was
// sent to (IPV6_PKTINFO), as a userspace proxy behind a redirect must;
// without, from whatever address routing picks.
func StartEcho(t testing.TB, ns *Netns, port int, pktinfo bool) *EchoServers {
	t.Helper()
	s := &EchoServers{Port: port}
	// Marked as kproxy's proxy-port sockets are: the nftables portal
	// delivers redirected traffic only to such sockets.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, steer.SocketMark)
		}); err != nil {
			return err
		}
		return serr
	}}
	ns.MustDo(t, func() error {
		ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("::", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		pc, err := lc.ListenPacket(context.Background(), "udp", net.JoinHostPort("::", strconv.Itoa(port)))
		if err != nil {
			ln.Close()
			return err
		}
		s.tcp, s.udp = ln, pc.(*net.UDPConn)
		return nil
	})
	if pktinfo {
		rc, err := s.udp.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		}); err != nil || serr != nil {
			t.Fatalf("IPV6_RECVPKTINFO: %v %v", err, serr)
		}
	}
	reply := []byte(EchoReply(port))
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.tcp.Accept()
			if err != nil {
				return
			}
			c.Write(reply)
			c.Close()
		}
	}()
	go func() {
		defer s.wg.Done()
		buf, oob := make([]byte, 2048), make([]byte, 512)
		for {
			_, oobn, _, from, err := s.udp.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return
			}
			var out []byte
			if pktinfo {
				out = replyPktinfo(oob[:oobn])
			}
			s.udp.WriteMsgUDPAddrPort(reply, out, from)
		}
	}()
	t.Cleanup(func() {
		s.tcp.Close()
		s.udp.Close()
		s.wg.Wait()
	})
	return s
}

// replyPktinfo turns a received IPV6_PKTINFO (also given, v4-mapped, for
// IPv4 datagrams on a dual-stack socket) into the control message that
// sends the reply from that address.
func replyPktinfo(oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo {
			var info unix.Inet6Pktinfo
			copy(info.Addr[:], m.Data[:16])
			// Reply from the address, on whatever interface routing picks.
			b := make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
			h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
			h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
			h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
			copy(b[unix.CmsgLen(0):], info.Addr[:])
			return b
		}
	}
	return nil
}

// Ask sends one request to addr from inside ns and returns the answer:
// over TCP it sends nothing and reads until the server closes (the echo
// servers answer at once), over UDP it sends "ping" and reads one datagram.
func Ask(ns *Netns, network string, addr netip.AddrPort, timeout time.Duration) (string, error) {
	var req []byte
	if network == "udp" {
		req = []byte("ping")
	}
	return Exchange(ns, network, addr, req, timeout)
}

// Exchange dials addr from inside ns, sends req and returns the answer,
// all within timeout. Over TCP it sends req (if any), half-closes and
// reads until the server closes; over UDP it sends req on a connected
// socket and reads one datagram.
func Exchange(ns *Netns, network string, addr netip.AddrPort, req []byte, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout(network, addr.String(), timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if network == "udp" || network == "udp4" || network == "udp6" {
		if _, err := c.Write(req); err != nil {
			return "", err
		}
		buf := make([]byte, 64*1024)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	if len(req) > 0 {
		if _, err := c.Write(req); err != nil {
			return "", err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := tc.CloseWrite(); err != nil {
				return "", err
			}
		}
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// ExpectEcho asks addr and wants the answer of the echo servers on port.
func ExpectEcho(t testing.TB, ns *Netns, network string, addr netip.AddrPort, port int) {
	t.Helper()
	got, err := Ask(ns, network, addr, 2*time.Second)
	if want := EchoReply(port); err != nil || got != want {
		t.Errorf("%s %s from %s: got %q, %v; want %q", network, addr, ns.Name, got, err, want)
	}
}

// IsRefused reports whether err is a refusal: connection refused (TCP
// reset, or ICMP port unreachable reported on a connected UDP socket), or,
// for UDP, EPERM from send, which is what a client on the node itself sees
// when a reject in the output hook drops its datagram.
func IsRefused(network string, err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || (network != "tcp" && errors.Is(err, syscall.EPERM))
}

// ExpectRefused wants connection refused (IsRefused) within a second.
func ExpectRefused(t testing.TB, ns *Netns, network string, addr netip.AddrPort) {
	t.Helper()
	start := time.Now()
	got, err := Ask(ns, network, addr, 3*time.Second)
	elapsed := time.Since(start)
	if !IsRefused(network, err) || elapsed > time.Second {
		t.Errorf("%s %s from %s: got %q, %v after %v; want connection refused within 1s", network, addr, ns.Name, got, err, elapsed)
	}
}

// ExpectNoAnswer wants no answer (any error, within a second's timeout).
func ExpectNoAnswer(t testing.TB, ns *Netns, network string, addr netip.AddrPort) {
	t.Helper()
	got, err := Ask(ns, network, addr, time.Second)
	if err == nil {
		t.Errorf("%s %s from %s: got answer %q, want none", network, addr, ns.Name, got)
	}
}
