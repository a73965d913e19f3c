package datapath

import (
	"context"
	"net"
	"path/filepath"
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
// new flow each, ended 50 ms after its answer.
func udpQueries(tb testing.TB, k SocketKeeper, n int, each func()) {
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
		p.Serve(ln, UDPOptions{Picker: picker, Stats: &Stats{}, IdleTimeout: 50 * time.Millisecond}, nil)
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
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("query")); err != nil {
			tb.Fatal(err)
		}
		if k, err := c.Read(buf); err != nil || string(buf[:k]) != "query" {
			tb.Fatalf("answer %q, %v", buf[:k], err)
		}
		c.Close()
		if each != nil {
			each()
		}
	}
}

// With a keeper, every flow is held there while it lives and dropped
// once it ends: the keeper holds no flow of the past.
func TestUDPFlowsKeptWhileTheyLive(t *testing.T) {
	s, k := realKeeper(t)
	held := 0
	udpQueries(t, k, 20, func() {
		held = max(held, s.KeptConns())
	})
	if held == 0 {
		t.Fatal("the keeper never held a flow")
	}
	for deadline := time.Now().Add(5 * time.Second); s.KeptConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the keeper still holds %d flows after they ended", s.KeptConns())
		}
		time.Sleep(10 * time.Millisecond) // idle timeouts, then batched drops: nothing to await
	}
	t.Logf("up to %d flows held at once", held)
}

// BenchmarkUDPNewFlow is a query from a new socket each (a new flow, as
// a resolver's), without and with the socket keeper holding each flow.
func BenchmarkUDPNewFlow(b *testing.B) {
	b.Run("unkept", func(b *testing.B) { udpQueries(b, nil, b.N, nil) })
	b.Run("kept", func(b *testing.B) {
		_, k := realKeeper(b)
		udpQueries(b, k, b.N, nil)
	})
}
