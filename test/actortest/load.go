// Package actortest holds what the tests of the actor tree (package
// actors) and of its fault injection (actors/faults) share: the client
// load of the crash tests (echo round trips against test/backends, a
// hammer of concurrent clients, the goroutine and fd baseline they must
// return to) and a waiter on the service ports' states.
package actortest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// RoundTrip makes one full connection: dial, read the backend's name, echo
// a line, close. It is what the hammering clients do.
func RoundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := backends.ReadName(r); err != nil {
		return fmt.Errorf("read name: %w", err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		return fmt.Errorf("echo: %q %v", line, err)
	}
	return nil
}

// Hammer runs clients against addrs until stop closes, counting failures
// per address.
type Hammer struct {
	WG sync.WaitGroup
	OK atomic.Int64
	mu sync.Mutex
	// Failures are the failed round trips by address: read them after
	// WG.Wait.
	Failures map[string][]error
	// phase names what the test is doing (the crash kind), so a failure
	// says when it happened.
	phase atomic.Pointer[string]
}

// SetPhase names what the test does from now on, for the failures.
func (h *Hammer) SetPhase(p string) { h.phase.Store(&p) }

// StartHammer starts clients round-tripping to addrs in turn until stop
// closes.
func StartHammer(addrs []string, clients int, stop <-chan struct{}) *Hammer {
	h := &Hammer{Failures: map[string][]error{}}
	for i := range clients {
		h.WG.Add(1)
		go func() {
			defer h.WG.Done()
			for n := i; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				addr := addrs[n%len(addrs)]
				if err := RoundTrip(addr); err != nil {
					if p := h.phase.Load(); p != nil {
						err = fmt.Errorf("during %s: %w", *p, err)
					}
					h.mu.Lock()
					h.Failures[addr] = append(h.Failures[addr], err)
					h.mu.Unlock()
				} else {
					h.OK.Add(1)
				}
			}
		}()
	}
	return h
}

// Failed counts the hammer's failed requests and returns the first one.
func (h *Hammer) Failed() (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var first error
	for _, errs := range h.Failures {
		n += len(errs)
		if first == nil && len(errs) > 0 {
			first = errs[0]
		}
	}
	return n, first
}

// WaitOK waits until the hammer has served n requests in all.
func WaitOK(t *testing.T, h *Hammer, n int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for h.OK.Load() < n {
		if time.Now().After(deadline) {
			f, first := h.Failed()
			t.Fatalf("the service did not recover within 15 s (%d ok, %d failed, first %v)", h.OK.Load(), f, first)
		}
		time.Sleep(5 * time.Millisecond) // a counter: nothing to await
	}
}

// OpenFDs counts the process's open file descriptors (the test skips
// where /proc is missing).
func OpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(ents)
}

// WaitBaseline waits until goroutines and fds are back to their baseline
// and returns them. Connection goroutines finish as their sockets close;
// there is no event for "all goroutines ended", so it polls. GC each time:
// Go keeps splice pipes (2 fds each) in a sync.Pool until two collections
// have passed.
func WaitBaseline(t *testing.T, baseGoroutines, baseFDs int, after string) (g, fds int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		g, fds = runtime.NumGoroutine(), OpenFDs(t)
		if g <= baseGoroutines+2 && fds <= baseFDs {
			return g, fds
		}
		if time.Now().After(deadline) {
			t.Fatalf("leak after %s: goroutines %d (baseline %d), fds %d (baseline %d)", after, g, baseGoroutines, fds, baseFDs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
