package datapath

import (
	"net"
	"net/netip"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// acceptPeer gives each accepted connection's peer as the goroutine data
// path's RemoteAddr does (a v4-mapped peer unmapped), and EAGAIN when no
// connection waits.
func TestAcceptPeerGivesThePeersAddress(t *testing.T) {
	for _, tc := range []struct{ listen, dial, want string }{
		{"tcp4", "127.0.0.1", "127.0.0.1"},
		{"tcp6", "::1", "::1"},
		{"tcp", "127.0.0.1", "127.0.0.1"}, // a dual-stack socket: v4-mapped
	} {
		laddr := "127.0.0.1:0"
		if tc.listen != "tcp4" {
			laddr = "[::]:0"
			if tc.listen == "tcp6" {
				laddr = "[::1]:0"
			}
		}
		ln, err := net.Listen(tc.listen, laddr)
		if err != nil {
			t.Skipf("%s: %v", tc.listen, err)
		}
		defer ln.Close()
		rc, err := ln.(*net.TCPListener).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		accept := func() (nfd int, peer netip.Addr, err error) {
			rc.Control(func(fd uintptr) { nfd, peer, err = acceptPeer(int(fd)) })
			return
		}
		if _, _, err := accept(); err != unix.EAGAIN {
			t.Fatalf("%s: accept with none waiting: %v, want EAGAIN", tc.listen, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		c, err := net.Dial("tcp", net.JoinHostPort(tc.dial, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Over loopback the handshake is done, and the connection queued,
		// by the time Dial returns.
		nfd, peer, err := accept()
		if err != nil {
			t.Fatalf("%s: accept: %v", tc.listen, err)
		}
		unix.Close(nfd)
		if want := netip.MustParseAddr(tc.want); peer != want {
			t.Errorf("%s dialled from %s: peer %s, want %s", tc.listen, tc.dial, peer, want)
		}
	}
}
