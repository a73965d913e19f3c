package datapath

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoBackend answers every connection by echoing it, and closes its
// write half once the client has closed its own.
func echoBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

// loopProxy serves a listener to endpoint on the event loops.
func loopProxy(t *testing.T, endpoint string, conns *ConnTracker, limits *Limits, stats *Stats) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return endpoint, nil }),
		Conns: conns, Limits: limits, Stats: stats, EventLoops: true}
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
	t.Cleanup(func() { ln.Close(); <-served })
	return ln.Addr().String()
}

// echoOnce sends msg, half-closes, and wants msg back, then the end of
// the stream.
func echoOnce(addr, msg string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if string(got) != msg {
		return errors.New("echo: got " + string(got))
	}
	return nil
}

// A panic while a loop handles one connection's event costs that
// connection only: under load on two services whose connections share
// the loops, every connection of one panics, and the other fails none;
// the loops then serve the first again.
func TestLoopPanicCostsOnlyItsConnection(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	calmEP, boomEP := echoBackend(t), echoBackend(t)
	calm := loopProxy(t, calmEP, nil, nil, nil)
	boom := loopProxy(t, boomEP, nil, nil, nil)
	var panics atomic.Int64
	fault := func(c *loopConn) {
		if c.endpoint == boomEP {
			panics.Add(1)
			panic("injected")
		}
	}
	loopFault.Store(&fault)
	t.Cleanup(func() { loopFault.Store(nil) })

	const clients, requests = 4, 200
	var calmFailed, boomServed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range requests {
				if echoOnce(calm, "calm") != nil {
					calmFailed.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range requests {
				if echoOnce(boom, "boom") == nil {
					boomServed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("calm: %d of %d failed; boom: %d served, %d panics", calmFailed.Load(), clients*requests, boomServed.Load(), panics.Load())
	if calmFailed.Load() > 0 {
		t.Fatalf("%d of the calm service's %d requests failed while the other's connections panicked on the same loops", calmFailed.Load(), clients*requests)
	}
	if boomServed.Load() > 0 || panics.Load() == 0 {
		t.Fatalf("%d requests served through panicking events (%d panics): the fault was not injected", boomServed.Load(), panics.Load())
	}
	loopFault.Store(nil)
	if err := echoOnce(boom, "after"); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
}

// A connect still in progress when the first connect returns (an
// endpoint on another node) is finished by the loop: its bytes, its
// half-close and its counters are the same as a connect done at once.
func TestLoopFinishesConnectsInProgress(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	connectInLoop.Store(true)
	t.Cleanup(func() { connectInLoop.Store(false) })
	conns, stats := NewConnTracker(), &Stats{}
	limits := &Limits{MaxConns: 100}
	addr := loopProxy(t, echoBackend(t), conns, limits, stats)
	for i := range 50 {
		if err := echoOnce(addr, "in progress"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	waitFor(t, func() bool { c, _, _, _ := limits.Counts(); return c == 0 && conns.Len() == 0 },
		"every connection given back to the limits and the tracker")
	if got := stats.DialFailures.Load(); got != 0 {
		t.Fatalf("%d dial failures", got)
	}
	if got, want := stats.BytesToEndpoint.Load(), int64(50*len("in progress")); got != want {
		t.Fatalf("%d bytes to the endpoint, want %d", got, want)
	}
}

// Closing a loop's connections from another goroutine (a drain's
// deadline) ends them at once and gives back what they held.
func TestLoopConnectionsCloseFromTheTracker(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	conns := NewConnTracker()
	limits := &Limits{MaxConns: 100}
	addr := loopProxy(t, echoBackend(t), conns, limits, nil)
	var clients []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rd := bufio.NewReader(c)
		io.WriteString(c, "hello\n")
		if line, err := rd.ReadString('\n'); err != nil || line != "hello\n" {
			t.Fatalf("echo: %q, %v", line, err)
		}
		clients = append(clients, c)
	}
	if n := conns.Len(); n != 10 {
		t.Fatalf("%d connections tracked, want 10", n)
	}
	conns.CloseAll()
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("client %d after CloseAll: %v, want the end of the stream", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if left := conns.Drain(ctx); left != 0 {
		t.Fatalf("%d connections left after CloseAll", left)
	}
	waitFor(t, func() bool { c, _, _, _ := limits.Counts(); return c == 0 }, "the limits given back")
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// waitFor polls cond (state owned by other goroutines) until it holds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
