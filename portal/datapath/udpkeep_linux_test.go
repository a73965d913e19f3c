package datapath

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/keeper"
)

// keeperClient is the real keeper's client as a SocketKeeper (kproxy's
// own adapter is cmd/kproxy's inherited).
type keeperClient struct{ *keeper.Client }

func (k keeperClient) TakeConns(string, string) []KeptConn { return nil }
func (k keeperClient) TakeFlows(network, address string) []KeptFlow {
	var fs []KeptFlow
	for _, f := range k.Client.TakeFlows(network, address) {
		fs = append(fs, KeptFlow(f))
	}
	return fs
}

// realKeeper starts a socket keeper and connects a client to it.
func realKeeper(tb testing.TB) (*keeper.Server, keeperClient) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "keeper.sock")
	s, err := keeper.Listen(path, keeper.Options{Log: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx) }()
	c, err := keeper.Dial(path, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		cancel()
		<-done
	})
	return s, keeperClient{c}
}

// udpQueries serves a UDPProxy (kept by k when not nil) in front of an
// echo and makes n queries, each from a new socket as a resolver's: a
// new flow each, ended idle after its answer; then it calls after, while
// the proxy still serves.
func udpQueries(tb testing.TB, k SocketKeeper, n int, idle time.Duration, after func()) {
	backend := udpEcho(tb)
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	p := &UDPProxy{}
	p.setKeeper(k, ln.LocalAddr().String())
	picker := PickerFunc(func(string, []string, bool) (string, error) { return backend.LocalAddr().String(), nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(ln, UDPOptions{Picker: picker, Stats: &Stats{}, IdleTimeout: idle}, nil)
	}()
	defer func() {
		ln.Close()
		<-done
		p.CloseFlows()
	}()
	to := ln.LocalAddr().(*net.UDPAddr)
	buf := make([]byte, 64)
	for range n {
		c, err := net.DialUDP("udp", nil, to)
		if err != nil {
			tb.Fatal(err)
		}
		// Open until after (which counts flows): a port closed may be
		// the next client's, and two clients on one port are one flow.
		if after != nil {
			defer c.Close()
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("query")); err != nil {
			tb.Fatal(err)
		}
		if k, err := c.Read(buf); err != nil || string(buf[:k]) != "query" {
			tb.Fatalf("answer %q, %v", buf[:k], err)
		}
		if after == nil {
			c.Close()
		}
	}
	if after != nil {
		after()
	}
}

// With a keeper, every flow is held there while it lives and dropped
// once it ends: the keeper holds no flow of the past.
func TestUDPFlowsKeptWhileTheyLive(t *testing.T) {
	const n = 20
	s, k := realKeeper(t)
	// Flows idle for a minute outlive the queries (however slow a loaded
	// machine makes them): each of the n is held; they end when the
	// socket's flows are closed, as idle ones end.
	udpQueries(t, k, n, time.Minute, func() {
		awaitKept(t, s, n, "every live flow held")
	})
	awaitKept(t, s, 0, "no flow held once they ended")
}

// awaitKept waits until the keeper holds want connections and flows (its
// count moves as its socket's messages are read: nothing to wait on).
func awaitKept(t *testing.T, s *keeper.Server, want int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.KeptConns() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the keeper holds %d, want %d", what, s.KeptConns(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkUDPNewFlow is a query from a new socket each (a new flow, as
// a resolver's), without and with the socket keeper holding each flow.
func BenchmarkUDPNewFlow(b *testing.B) {
	// Flows end 50 ms after their answer, so b.N of them never hold b.N
	// descriptors at once.
	b.Run("unkept", func(b *testing.B) { udpQueries(b, nil, b.N, 50*time.Millisecond, nil) })
	b.Run("kept", func(b *testing.B) {
		_, k := realKeeper(b)
		udpQueries(b, k, b.N, 50*time.Millisecond, nil)
	})
}

// dupKeeper keeps a duplicate of every flow's socket, as the keeper does,
// and leaves them all to the next process (a restart in place).
type dupKeeper struct {
	recordingKeeper
	mu    sync.Mutex
	flows []*os.File
}

func (k *dupKeeper) Detached() bool { return true }
func (k *dupKeeper) KeepFlow(_, _, _ string, _ []byte, fd int) string {
	dup, err := syscall.Dup(fd)
	if err != nil {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.flows = append(k.flows, os.NewFile(uintptr(dup), "kept flow"))
	return fmt.Sprint(len(k.flows))
}

// A UDP socket closed at the end of a restart's grace, while an endpoint
// streams answers, loses none: each is either sent on to the client or
// left queued in the flow's socket the keeper holds.
func TestFlowsClosedAtGraceEndLoseNoAnswer(t *testing.T) {
	for round := range 20 {
		sent, got, queued := closeDuringAnswers(t)
		if got+queued != sent {
			t.Fatalf("round %d: the endpoint sent %d answers, the client got %d and %d are queued for the next process: %d lost",
				round, sent, got, queued, sent-got-queued)
		}
	}
}

// closeDuringAnswers serves a flow whose endpoint answers its query with
// a stream, closes the listening socket as a restart's grace ends (the
// socket keeper holding the flow), then stops the endpoint and counts.
func closeDuringAnswers(t *testing.T) (sent, got, queued int) {
	endpoint, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer endpoint.Close()
	stop := make(chan struct{})
	streamed := make(chan int)
	go func() {
		buf := make([]byte, 64)
		_, from, err := endpoint.ReadFromUDPAddrPort(buf)
		n := 0
		for ; err == nil; n++ {
			select {
			case <-stop:
				streamed <- n
				return
			default:
			}
			_, err = endpoint.WriteToUDPAddrPort([]byte("answer"), from)
			time.Sleep(50 * time.Microsecond) // a stream's pace, not a wait
		}
		streamed <- n - 1
	}()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	k := &dupKeeper{}
	p := &UDPProxy{}
	p.setKeeper(k, ln.LocalAddr().String())
	l := &Listener{udp: ln, flows: p}
	picker := PickerFunc(func(string, []string, bool) (string, error) { return endpoint.LocalAddr().String(), nil })
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.Serve(ln, UDPOptions{Picker: picker, Stats: &Stats{}}, nil)
	}()
	client, err := net.DialUDP("udp", nil, ln.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(buf); err != nil {
		t.Fatalf("first answer: %v", err)
	}
	got = 1
	p.Drain() // the restart: the socket is no longer read, its flows answer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over
	l.CloseWhenDrained(ctx)
	<-served
	close(stop)
	sent = <-streamed
	got += drainQueue(t, client)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.flows {
		c, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		queued += drainQueue(t, c.(*net.UDPConn))
		c.Close()
	}
	return sent, got, queued
}

// drainQueue counts the datagrams queued in c (every one sent to it has
// arrived: loopback delivers within the send).
func drainQueue(t *testing.T, c syscall.Conn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n := 0
	rc.Control(func(fd uintptr) {
		for {
			if _, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT); err != nil {
				return
			}
			n++
		}
	})
	return n
}
