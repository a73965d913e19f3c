package portal

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// listenBacklog is the accept queue of the backend below: listen(2)'s
// backlog 5, Python's http.server default and many small servers'.
const listenBacklog = 5

// slowAcceptBackend is a single-threaded server with a 5-deep accept
// queue: it answers one connection at a time ("ok\n" to a line), and
// every pauseEvery-th answer takes pause (a slow request). Meanwhile
// clients fill the accept queue and the kernel drops further SYNs, as it
// does for a full queue; the client's kernel retransmits them after 1 s.
func slowAcceptBackend(t *testing.T, pauseEvery int, pause time.Duration) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "backend")
	defer f.Close() // the listener holds its own descriptor
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, listenBacklog); err != nil {
		t.Fatal(err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				if n%pauseEvery == 0 {
					time.Sleep(pause) // the slow request: nothing is accepted meanwhile
				}
				io.WriteString(c, "ok\n")
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// onePicker picks its endpoints in turn and, as kproxy's Balancer does,
// none that the connection excludes: ErrNoEndpoints when none is left.
type onePicker struct {
	endpoints []string
	next      atomic.Uint64
}

func (p *onePicker) Pick(_ string, exclude []string, _ bool) (Pick, error) {
	n := uint64(len(p.endpoints))
	start := p.next.Add(1)
	for i := range n {
		if e := p.endpoints[(start+i)%n]; !slices.Contains(exclude, e) {
			return Pick{Endpoint: e}, nil
		}
	}
	return Pick{}, ErrNoEndpoints
}

func (*onePicker) Dialed(string, error) {}

// requestLoad makes requests connection-per-request round trips to addr
// from clients concurrent clients, within limit, and returns the failed
// ones (connect, write or read errors, wrong answers) with the first error.
func requestLoad(addr string, requests, clients int, limit time.Duration) (done, failed int64, first error) {
	var next, ok, bad atomic.Int64
	var once sync.Once
	deadline := time.Now().Add(limit)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(requests) && time.Now().Before(deadline) {
				err := func() error {
					c, err := net.DialTimeout("tcp", addr, 10*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.WriteString(c, "GET\n"); err != nil {
						return err
					}
					got, err := io.ReadAll(c)
					if err == nil && string(got) != "ok\n" {
						err = fmt.Errorf("answer %q (reset before the endpoint answered)", got)
					}
					return err
				}()
				if err != nil {
					bad.Add(1)
					once.Do(func() { first = err })
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return ok.Load() + bad.Load(), bad.Load(), first
}

// A SYN dropped by an endpoint's full accept queue is not a dead endpoint:
// the kernel retransmits it after 1 s, and a direct client waits for that.
// Through the proxy, a connect that times out after 250 ms is tried again
// with the longer timeouts of the ladder, even when the endpoint is the
// only one, so no client is reset while an attempt can still succeed.
func TestTCPDroppedSYNIsRetriedNotReset(t *testing.T) {
	// Every 10th request takes 400 ms: longer than the first dial timeout
	// (250 ms), far shorter than the ladder (3.75 s). With 8 clients, 6
	// connections queue (the backlog's 5, plus one: Linux allows backlog+1)
	// behind it and the kernel drops the next ones' SYNs.
	backend := slowAcceptBackend(t, 10, 400*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stats := &Stats{}
	p := &TCPProxy{Picker: &onePicker{endpoints: []string{backend}}, Stats: stats, Log: zerolog.Nop()}
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
	t.Cleanup(func() { ln.Close(); <-served })

	const requests, clients = 150, 8
	done, failed, first := requestLoad(ln.Addr().String(), requests, clients, 60*time.Second)
	t.Logf("%d requests through the proxy, %d failed; %d endpoint dials timed out", done, failed, stats.DialFailures.Load())
	if failed > 0 {
		t.Fatalf("%d of %d requests failed through the proxy (first: %v): a dropped SYN reset the client", failed, done, first)
	}
	if done < requests {
		t.Fatalf("only %d of %d requests in the time allowed", done, requests)
	}
	if stats.DialFailures.Load() == 0 {
		t.Fatal("no endpoint dial timed out: the accept queue never overflowed, the test proves nothing")
	}
}

// The direct control: the same load straight to the backend loses no
// request (the kernel retransmits the dropped SYNs), so the proxy must
// not either.
func TestDroppedSYNDirectControl(t *testing.T) {
	backend := slowAcceptBackend(t, 10, 400*time.Millisecond)
	done, failed, first := requestLoad(backend, 150, 8, 60*time.Second)
	if failed > 0 || done < 150 {
		t.Fatalf("direct: %d of %d requests failed (first: %v)", failed, done, first)
	}
}
