//go:build linux

package keeper

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
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

func connFD(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// An established connection kept while its process is gone stays open:
// neither peer sees an end, what the client sends meanwhile queues in the
// proxy's socket, and the next process takes both sockets back and moves
// the bytes on. Shut down and dropped, it ends for both peers.
func TestKeptConnectionOutlivesItsProcess(t *testing.T) {
	s, path := startKeeper(t, 0)
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	backend, err := net.ListenTCP("tcp", lo)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	ln, err := net.ListenTCP("tcp", lo)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	client, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	fromClient, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	toBackend, err := net.DialTCP("tcp", nil, backend.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	atBackend, err := backend.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer atBackend.Close()

	first, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	first.Keep("tcp", addr, fdOf(t, ln))
	// Kept from its accept, then with the endpoint and its two pipes.
	id := first.KeepConn("tcp", addr, "", connFD(t, fromClient))
	if id == "" {
		t.Fatal("KeepConn kept nothing")
	}
	var pipes [4]int
	for i := 0; i < 4; i += 2 {
		if err := syscall.Pipe2(pipes[i:i+2], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
			t.Fatal(err)
		}
	}
	if again := first.KeepConn("tcp", addr, id, connFD(t, fromClient), connFD(t, toBackend), pipes[0], pipes[1], pipes[2], pipes[3]); again != id {
		t.Fatalf("kept again as %q, want %q", again, id)
	}
	// Bytes the process had read from the client into the pipe, not yet
	// written to the endpoint.
	if _, err := syscall.Write(pipes[1], []byte("in the pipe;")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.KeptConns() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper never held the connection")
		}
		time.Sleep(time.Millisecond) // a message with no reply
	}
	// The process dies: every descriptor of its closes, none shut down.
	fromClient.Close()
	toBackend.Close()
	for _, fd := range pipes {
		syscall.Close(fd)
	}
	ln.Close()
	first.Close()
	if _, err := client.Write([]byte("sent while no proxy ran;")); err != nil {
		t.Fatal(err)
	}

	next, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	cs := next.TakeConns("tcp", addr)
	if len(cs) != 1 || cs[0].ID != id || cs[0].Endpoint == nil || len(cs[0].Pipes) != 4 {
		t.Fatalf("the keeper gave back %d connections (%v), want the one kept as %s with its endpoint and pipes", len(cs), cs, id)
	}
	if again := next.TakeConns("tcp", addr); len(again) != 0 {
		t.Fatalf("TakeConns gave the connection twice")
	}
	c, err := net.FileConn(cs[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	e, err := net.FileConn(cs[0].Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte(" and after")); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	// First what the pipe holds, then what queued in the socket.
	held := make([]byte, 100)
	n, err := cs[0].Pipes[0].Read(held)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Write(held[:n]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(e, c); err != nil {
		t.Fatalf("the next process moving the client's bytes: %v", err)
	}
	c.Close()
	e.Close()
	// The next process ends the connection as kproxy does: shut down (the
	// keeper's copies hold the sockets), closed, dropped.
	for _, f := range []*os.File{cs[0].Client, cs[0].Endpoint} {
		rc, _ := f.SyscallConn()
		rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
	cs[0].Close()
	next.DropConn(id)
	atBackend.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(atBackend)
	if err != nil || string(got) != "in the pipe;sent while no proxy ran; and after" {
		t.Fatalf("the endpoint read %q, %v; want every byte the client sent, then the end", got, err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.KeptConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper still holds a dropped connection")
		}
		time.Sleep(time.Millisecond)
	}
}

// A UDP flow kept (its socket to the endpoint, with the client's address
// and the reply's control message) outlives its process: the endpoint's
// answer queues in the kept socket, and the next process takes the flow
// back, with the answer, once. Dropped, the keeper holds it no longer.
func TestKeptFlowOutlivesItsProcess(t *testing.T) {
	s, path := startKeeper(t, 0)
	first, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	endpoint, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer endpoint.Close()
	flow, err := net.DialUDP("udp", nil, endpoint.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := flow.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	const listen, client = "0.0.0.0:35353", "192.0.2.7:40001"
	reply := []byte{1, 2, 3, 0xff}
	var id string
	rc.Control(func(fd uintptr) { id = first.KeepFlow("udp", listen, client, reply, int(fd)) })
	if id == "" {
		t.Fatal("KeepFlow kept nothing")
	}
	if _, err := flow.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	// The process dies before the answer comes.
	flow.Close()
	first.Close()
	buf := make([]byte, 100)
	endpoint.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := endpoint.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "query" {
		t.Fatalf("endpoint read %q, %v", buf[:n], err)
	}
	if _, err := endpoint.WriteToUDP([]byte("answer"), from); err != nil {
		t.Fatal(err)
	}

	next, err := Dial(path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	fs := next.TakeFlows("udp", listen)
	if len(fs) != 1 || fs[0].ID != id || fs[0].Client != client || string(fs[0].Reply) != string(reply) || fs[0].Endpoint == nil {
		t.Fatalf("the keeper gave back %+v, want the flow kept as %s of client %s with its reply message", fs, id, client)
	}
	if again := next.TakeFlows("udp", listen); len(again) != 0 {
		t.Fatal("TakeFlows gave the flow twice")
	}
	c, err := net.FileConn(fs[0].Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	fs[0].Endpoint.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err = c.Read(buf)
	if err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("the next process read %q, %v from the kept flow; want the answer that came meanwhile", buf[:n], err)
	}
	c.Close()
	next.DropConn(id)
	next.flushUnconns()
	for deadline := time.Now().Add(5 * time.Second); s.KeptConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the keeper still holds a dropped flow")
		}
		time.Sleep(time.Millisecond) // a message with no reply
	}
}
