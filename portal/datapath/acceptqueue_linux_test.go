package datapath

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// excludingPicker picks its endpoints in turn and, as kproxy's Balancer
// does, none that the connection excludes: ErrNoEndpoints when none is
// left.
type excludingPicker struct {
	endpoints []string
	next      atomic.Uint64
}

func (p *excludingPicker) Pick(_ string, exclude []string, _ bool) (Pick, error) {
	n := uint64(len(p.endpoints))
	start := p.next.Add(1)
	for i := range n {
		if e := p.endpoints[(start+i)%n]; !slices.Contains(exclude, e) {
			return Pick{Endpoint: e}, nil
		}
	}
	return Pick{}, ErrNoEndpoints
}

func (*excludingPicker) Dialed(string, error) {}

// The accept-queue load: a backend with listen(2)'s backlog 5 whose every
// 10th request takes 400 ms (longer than the first dial timeout, 250 ms;
// far shorter than the ladder, 3.75 s), and 8 connection-per-request
// clients: behind the slow request 6 connections queue (Linux admits
// backlog+1) and the kernel drops the next SYNs.
const (
	queueBacklog, queuePauseEvery, queuePause = 5, 10, 400 * time.Millisecond
	queueRequests, queueClients               = 150, 8
)

func slowAcceptBackend(t *testing.T) string {
	t.Helper()
	b, err := backends.StartSlowAccept("127.0.0.1:0", queueBacklog, queuePauseEvery, queuePause)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// A SYN dropped by an endpoint's full accept queue is not a dead endpoint:
// the kernel retransmits it after 1 s, and a direct client waits for that
// (TestDroppedSYNDirectControl). Through the proxy, a connect that timed
// out after 250 ms is tried again with the ladder's longer timeouts, even
// when the endpoint is the only one, so no client is reset while an
// attempt can still succeed.
func TestTCPDroppedSYNIsRetriedNotReset(t *testing.T) {
	backend := slowAcceptBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stats := &Stats{}
	p := &TCPProxy{Picker: &excludingPicker{endpoints: []string{backend}}, Stats: stats}
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
	t.Cleanup(func() { ln.Close(); <-served })

	made, failed, first := backends.Requests(context.Background(), ln.Addr().String(), queueRequests, queueClients, time.Minute)
	t.Logf("%d requests through the proxy, %d failed; %d endpoint dials timed out", made, failed, stats.DialFailures.Load())
	if failed > 0 {
		t.Fatalf("%d of %d requests failed through the proxy (first: %v): a dropped SYN reset the client", failed, made, first)
	}
	if made < queueRequests {
		t.Fatalf("only %d of %d requests in the time allowed", made, queueRequests)
	}
	if stats.DialFailures.Load() == 0 {
		t.Fatal("no endpoint dial timed out: the accept queue never overflowed, so this proves nothing")
	}
}

// The control: the same load straight to the backend loses no request
// (the kernel retransmits the dropped SYNs), so the proxy must not either.
func TestDroppedSYNDirectControl(t *testing.T) {
	backend := slowAcceptBackend(t)
	made, failed, first := backends.Requests(context.Background(), backend, queueRequests, queueClients, time.Minute)
	if failed > 0 || made < queueRequests {
		t.Fatalf("direct: %d of %d requests failed (first: %v)", failed, made, first)
	}
}

// fullQueueEndpoint is an endpoint whose handshakes never complete: a
// listener with a backlog of 0 that nobody accepts from, its queue full
// (backlog+1 connections); the kernel drops every further SYN.
func fullQueueEndpoint(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the queue is full
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the kernel completes handshakes beyond the backlog here")
	return ""
}

// A connection dials a silent endpoint for as long as the kernel would
// retransmit a SYN, but not for a client that has gone: the dial ends at
// its next attempt.
func TestTCPDialEndsWhenTheClientLeaves(t *testing.T) {
	endpoint := fullQueueEndpoint(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := NewConnTracker()
	p := &TCPProxy{Picker: &excludingPicker{endpoints: []string{endpoint}}, Conns: conns}
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
	t.Cleanup(func() { ln.Close(); <-served })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// Past the ladder (3.75 s) the client still waits, not reset.
	c.SetReadDeadline(time.Now().Add(4 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read from a client whose only endpoint is silent: %v, want nothing yet", err)
	}
	c.Close()
	// The next attempt (2 s) sees the client gone.
	ctx, cancel := context.WithTimeout(context.Background(), 2*dialTimeouts[len(dialTimeouts)-1])
	defer cancel()
	conns.WaitDialed(ctx)
	if ctx.Err() != nil {
		t.Fatal("still dialing for a client that left")
	}
}
