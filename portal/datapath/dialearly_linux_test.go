package datapath

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The dialers' Control starts the connect: to an endpoint on this node it
// is made when Control returns, so Go's connect that follows has nothing
// to wait for (no park, no timer).
func TestConnectEarlyConnectsALocalEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i := range 50 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "dial")
		rc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := connectEarly("tcp4", ln.Addr().String(), rc); err != nil {
			t.Fatal(err)
		}
		var peerErr error
		rc.Control(func(fd uintptr) { _, peerErr = unix.Getpeername(int(fd)) })
		f.Close()
		if peerErr != nil {
			t.Fatalf("dial %d: not connected when Control returned: getpeername: %v", i, peerErr)
		}
	}
}

// What the ladder and outlier detection read from a dial's error is the
// same with the early connect: a refusal is ECONNREFUSED, not a timeout;
// a made connection reaches its endpoint.
func TestEarlyConnectDialerOutcomes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close()
	for _, ka := range []time.Duration{0, time.Minute} {
		d := keepAliveDialer(ka, time.Second)
		if d.Control == nil {
			t.Fatal("the dialer has no early connect")
		}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("keepalive %v: dial a listening endpoint: %v", ka, err)
		}
		if got := c.RemoteAddr().String(); got != ln.Addr().String() {
			t.Errorf("keepalive %v: connected to %s, want %s", ka, got, ln.Addr())
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := s.Read(buf); err != nil || buf[0] != 'x' {
			t.Fatalf("keepalive %v: endpoint read %q, %v", ka, buf, err)
		}
		s.Close()
		c.Close()
		_, err = d.Dial("tcp", refusing)
		if !errors.Is(err, syscall.ECONNREFUSED) || IsTimeout(err) {
			t.Errorf("keepalive %v: dial a closed port: %v, want ECONNREFUSED and no timeout", ka, err)
		}
	}
}
