package datapath

import (
	"context"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The portal's TCP sockets are plain TCP, not Multipath TCP (Go's
// listeners default to it where the kernel has it): kproxy dials its
// endpoints with plain TCP, so it must not offer its clients a protocol
// it cannot carry through, and an MPTCP listener is two kernel sockets.
func TestPortalSocketsArePlainTCP(t *testing.T) {
	l, err := Open(ListenSpec{Network: "tcp", Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rc, err := l.rawConn()
	if err != nil {
		t.Fatal(err)
	}
	checkProtocol(t, "service port", rc)
	shared, err := ListenShared(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	src, err := shared.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	checkProtocol(t, "operator endpoint", src)
}

func checkProtocol(t *testing.T, what string, rc syscall.RawConn) {
	t.Helper()
	var proto int
	var serr error
	rc.Control(func(fd uintptr) { proto, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL) })
	if serr != nil {
		t.Fatal(serr)
	}
	if proto != unix.IPPROTO_TCP {
		t.Errorf("%s socket's protocol is %d, want %d (TCP)", what, proto, unix.IPPROTO_TCP)
	}
}
