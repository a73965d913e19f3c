package actors

import (
	"bufio"
	"context"
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
	"github.com/kproxy/kproxy/messages"
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

// Chaos at 20 crashes/s across 200 ports for 10 s with concurrent clients:
// no connection fails, and goroutines and fds return to their baseline.
func TestChaosNoFailuresNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s chaos run")
	}
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 3)
	const n = 200
	var spes []*messages.ServicePortEndpoints
	var svcAddrs []string
	for i := range n {
		ip := fmt.Sprintf("127.0.%d.%d", 25+i/200, 1+i%200)
		spes = append(spes, spe(svcPort(fmt.Sprintf("c%03d", i), messages.Protocol_TCP, ip, 18080), endpoints(addrs...)))
		svcAddrs = append(svcAddrs, ip+":18080")
	}
	p.Submit(snapshot(1, spes...))
	w.wait(t, "200 service ports listening", func(m map[string]*messages.ServicePortState) bool {
		ready := 0
		for _, st := range m {
			if len(st.GetListenAddresses()) == 1 {
				ready++
			}
		}
		return ready == n
	})
	for _, a := range svcAddrs[:10] {
		if err := roundTrip(a); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	baseGoroutines, baseFDs := runtime.NumGoroutine(), openFDs(t)

	stop := make(chan struct{})
	h := startHammer(svcAddrs, 8, stop)
	crashes, err := p.Chaos(context.Background(), 20, 10*time.Second, 42)
	close(stop)
	h.wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(crashes) < 150 {
		t.Fatalf("chaos made only %d crashes in 10 s at 20/s", len(crashes))
	}
	for addr, errs := range h.failures {
		t.Errorf("%s: %d failed connections, first: %v", addr, len(errs), errs[0])
	}
	if h.ok.Load() < 1000 {
		t.Fatalf("only %d connections succeeded", h.ok.Load())
	}
	// Every port still works after the storm.
	for _, a := range svcAddrs {
		if err := roundTrip(a); err != nil {
			t.Fatalf("%s after chaos: %v", a, err)
		}
	}
	g, fds := waitBaseline(t, baseGoroutines, baseFDs, "chaos")
	t.Logf("%d crashes, %d connections ok; goroutines %d (baseline %d), fds %d (baseline %d)",
		len(crashes), h.ok.Load(), g, baseGoroutines, fds, baseFDs)
	if got := p.Counts(); got.FaultsInjected != int64(len(crashes)) || got.Restarts < int64(len(crashes)) {
		t.Fatalf("counts %+v, want %d faults and as many restarts", got, len(crashes))
	}
}

// A ServicePort crash restarts its children too (protoactor stops them);
// the Portal's sockets are held for its successor and the Proxier re-sends
// the desired state, so clients see nothing and the proxy port is kept.
func TestServicePortCrashKeepsSocketsAndPort(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("spcrash", messages.Protocol_TCP, "127.0.26.1", 18080)
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	before := w.listening(t, sp.GetKey().ID(), 1, 1)
	addr := "127.0.26.1:18080"

	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(60 * time.Second))
	hr := bufio.NewReader(held)
	if _, err := backends.ReadName(hr); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	h := startHammer([]string{addr}, 2, stop)
	for i := range 5 {
		okBefore := h.ok.Load()
		if err := p.Crash(sp.GetKey().ID(), roleServicePort, "test"); err != nil {
			t.Fatal(err)
		}
		// The restarted ServicePort reports, its restart counted on top
		// of the earlier ones, then clients keep completing connections.
		w.wait(t, fmt.Sprintf("service port restart %d", i+1), func(m map[string]*messages.ServicePortState) bool {
			st := m[sp.GetKey().ID()]
			return st.GetRestarts() == int32(i+1) && len(st.GetListenAddresses()) == 1
		})
		for deadline := time.Now().Add(10 * time.Second); h.ok.Load() < okBefore+10; {
			if time.Now().After(deadline) {
				t.Fatalf("restart %d: clients stalled", i+1)
			}
			time.Sleep(10 * time.Millisecond) // polling a counter the clients bump
		}
	}
	close(stop)
	h.wg.Wait()
	for _, errs := range h.failures {
		t.Fatalf("%d failed connections across ServicePort crashes, first: %v", len(errs), errs[0])
	}
	after, err := p.State(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := after.GetServicePorts()[0]
	if !slices.Equal(got.GetListenAddresses(), before.GetListenAddresses()) || got.GetProxyPort() != 0 {
		t.Fatalf("listen addresses changed: %v -> %v (proxy port %d)", before.GetListenAddresses(), got.GetListenAddresses(), got.GetProxyPort())
	}
	io.WriteString(held, "still here\n")
	if line, err := hr.ReadString('\n'); err != nil || line != "still here\n" {
		t.Fatalf("connection established before the crashes broke: %q %v", line, err)
	}
	if n := p.Listeners.Len(); n != 1 {
		t.Fatalf("%d sockets open, want the service port's 1", n)
	}
}
