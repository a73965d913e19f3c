package actors

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/bench/backends"
)

// roundTrip makes one full connection: dial, read the backend's name, echo
// a line, close. It is what the hammering clients do.
func roundTrip(addr string) error {
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

// hammer runs clients against addrs until stop closes, counting failures per address.
type hammer struct {
	wg       sync.WaitGroup
	ok       atomic.Int64
	mu       sync.Mutex
	failures map[string][]error
	// phase names what the test is doing (the crash kind), so a failure
	// says when it happened.
	phase atomic.Pointer[string]
}

func (h *hammer) setPhase(p string) { h.phase.Store(&p) }

func startHammer(addrs []string, clients int, stop <-chan struct{}) *hammer {
	h := &hammer{failures: map[string][]error{}}
	for i := range clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for n := i; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				addr := addrs[n%len(addrs)]
				if err := roundTrip(addr); err != nil {
					if p := h.phase.Load(); p != nil {
						err = fmt.Errorf("during %s: %w", *p, err)
					}
					h.mu.Lock()
					h.failures[addr] = append(h.failures[addr], err)
					h.mu.Unlock()
				} else {
					h.ok.Add(1)
				}
			}
		}()
	}
	return h
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(ents)
}

// waitBaseline waits until goroutines and fds are back to their baseline
// and returns them. Connection goroutines finish as their sockets close;
// there is no event for "all goroutines ended", so it polls. GC each time:
// Go keeps splice pipes (2 fds each) in a sync.Pool until two collections
// have passed.
func waitBaseline(t *testing.T, baseGoroutines, baseFDs int, after string) (g, fds int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		g, fds = runtime.NumGoroutine(), openFDs(t)
		if g <= baseGoroutines+2 && fds <= baseFDs {
			return g, fds
		}
		if time.Now().After(deadline) {
			t.Fatalf("leak after %s: goroutines %d (baseline %d), fds %d (baseline %d)", after, g, baseGoroutines, fds, baseFDs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failed counts the hammer's failed requests and returns the first one.
func (h *hammer) failed() (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var first error
	for _, errs := range h.failures {
		n += len(errs)
		if first == nil && len(errs) > 0 {
			first = errs[0]
		}
	}
	return n, first
}
