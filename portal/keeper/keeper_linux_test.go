//go:build linux

package keeper

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func startKeeper(t *testing.T, hold time.Duration) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keeper.sock")
	s, err := Listen(path, Options{Hold: hold, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, path
}

func fdOf(t *testing.T, l *net.TCPListener) uintptr {
	t.Helper()
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	rc.Control(func(f uintptr) { fd = f })
	return fd
}

// A listening socket kept while its process is gone (its own descriptor
// closed, nothing dropped) still completes connections into its backlog;
// the next process takes it back from the keeper and accepts them.
// Dropped, it closes for good: a connection is refused.
func TestKeptSocketOutlivesItsProcess(t *testing.T) {
	s, path := startKeeper(t, 0)
	// Its owner's alone: whoever reaches it can hand sockets over.
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("keeper socket %s: %v, %v; want no access for group or others", path, fi.Mode(), err)
	}
	first, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first.Keep("tcp", addr, fdOf(t, ln))
	// The process dies: its descriptors close, its connection to the keeper too.
	ln.Close()
	first.Close()

	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("connect while no process runs: %v, want it queued on the kept socket", err)
	}
	defer c.Close()

	next, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if next.Waiting() != 1 {
		t.Fatalf("the keeper listed %d sockets, want 1", next.Waiting())
	}
	f := next.Take("tcp", addr)
	if f == nil {
		t.Fatalf("no kept socket for %s", addr)
	}
	l2, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	l2.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	a, err := l2.Accept()
	if err != nil {
		t.Fatalf("the next process accepting the queued connection: %v", err)
	}
	a.Close()

	next.Drop("tcp", addr)
	for deadline := time.Now().Add(5 * time.Second); s.Kept() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper still holds a dropped socket")
		}
		time.Sleep(time.Millisecond) // the drop is a message: no reply to wait for
	}
	l2.Close()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a dropped and closed socket still takes connections")
	}
}

// With no process connected for the hold time, the keeper closes what it
// holds: a proxy that does not come back refuses rather than queues.
func TestKeeperGivesUpAfterHold(t *testing.T) {
	s, path := startKeeper(t, 50*time.Millisecond)
	k, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	k.Keep("tcp", ln.Addr().String(), fdOf(t, ln))
	for deadline := time.Now().Add(5 * time.Second); s.Kept() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper never held the socket")
		}
		time.Sleep(time.Millisecond)
	}
	ln.Close()
	k.Close()
	for deadline := time.Now().Add(5 * time.Second); s.Kept() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper still holds the socket long after its hold time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
