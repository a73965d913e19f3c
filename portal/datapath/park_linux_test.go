package datapath

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testParkAfter is short, so the tests see listeners park within their
// deadlines.
const testParkAfter = 50 * time.Millisecond

func parkOptions(backend string) ListenerOptions {
	return ListenerOptions{
		Picker:    PickerFunc(func(string, []string, bool) (string, error) { return backend, nil }),
		ParkAfter: testParkAfter,
	}
}

func openTCP(t *testing.T) *Listener {
	t.Helper()
	l, err := Open(ListenSpec{Network: "tcp", Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// addrOf is l's bound address (its spec asks for port 0).
func addrOf(l *Listener) string {
	if l.tcp != nil {
		return l.tcp.Addr().String()
	}
	return l.udp.LocalAddr().String()
}

// ask connects to addr and returns what comes back before the end of the
// stream.
func ask(addr string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	return string(got), err
}

// state is the listener's serving state: parked, or a loop running.
func (l *Listener) state() (parked, running bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.parked, l.done != nil
}

// awaitParked waits until l is parked with no loop running.
func awaitParked(t *testing.T, l *Listener) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if parked, running := l.state(); parked && !running {
			return
		}
		if time.Now().After(deadline) {
			parked, running := l.state()
			t.Fatalf("listener not parked after 5 s (parked %v, loop running %v)", parked, running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitGoroutines waits until at most n goroutines run.
func awaitGoroutines(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after %v, want at most %d", runtime.NumGoroutine(), within, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A served listener waits parked, with no goroutine; a connection wakes
// it and is served; once idle it parks again, and the goroutines go back
// to what they were; the next connection wakes it again.
func TestParkedListenerWakesServesAndParksAgain(t *testing.T) {
	backend := namedBackend(t, "b1")
	l := openTCP(t)
	theParkingSet() // its goroutine is not the listener's
	base := runtime.NumGoroutine()
	l.Serve(parkOptions(backend))
	if parked, running := l.state(); !parked || running {
		t.Fatalf("after Serve: parked %v, loop running %v; want parked, no loop", parked, running)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines after Serve, %d before: a parked listener needs none", n, base)
	}
	for i := range 3 {
		if got, err := ask(addrOf(l)); err != nil || got != "b1" {
			t.Fatalf("connection %d: got %q, %v; want b1", i, got, err)
		}
		awaitParked(t, l)
		awaitGoroutines(t, base, 5*time.Second)
	}
}

// OnFirstAccept is called once per Serve, not once per wakeup.
func TestParkingKeepsOnFirstAcceptOnce(t *testing.T) {
	backend := namedBackend(t, "b1")
	l := openTCP(t)
	var mu sync.Mutex
	calls := 0
	o := parkOptions(backend)
	o.OnFirstAccept = func() { mu.Lock(); calls++; mu.Unlock() }
	l.Serve(o)
	for range 2 {
		if got, err := ask(addrOf(l)); err != nil || got != "b1" {
			t.Fatalf("got %q, %v", got, err)
		}
		awaitParked(t, l)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("OnFirstAccept called %d times over two wakeups, want once", calls)
	}
}

// Pausing a parked listener takes it out of the parking set: a connection
// arriving while paused waits in the backlog, unaccepted, and the next
// Serve (with other options) serves it.
func TestPauseParkedListenerThenServe(t *testing.T) {
	b1, b2 := namedBackend(t, "b1"), namedBackend(t, "b2")
	l := openTCP(t)
	l.Serve(parkOptions(b1))
	l.Pause()
	if parked, running := l.state(); parked || running {
		t.Fatalf("after Pause: parked %v, loop running %v; want neither", parked, running)
	}
	// The kernel completes the handshake; nobody accepts while paused.
	c, err := net.Dial("tcp", addrOf(l))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); n != 0 || !isTimeout(err) {
		t.Fatalf("paused listener served a connection: read %d bytes, %v", n, err)
	}
	if parked, running := l.state(); parked || running {
		t.Fatalf("a connection woke a paused listener: parked %v, loop running %v", parked, running)
	}
	l.Serve(parkOptions(b2))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "b2" {
		t.Fatalf("queued connection after Serve: got %q, %v; want b2", got, err)
	}
	// Paused while running, then served again.
	if got, err := ask(addrOf(l)); err != nil || got != "b2" {
		t.Fatalf("got %q, %v", got, err)
	}
	l.Pause()
	l.Serve(parkOptions(b1))
	if got, err := ask(addrOf(l)); err != nil || got != "b1" {
		t.Fatalf("after pause and serve: got %q, %v; want b1", got, err)
	}
}

// Serve and Pause in a tight loop while clients connect: every connection
// is served by the end (no wakeup lost between parking, waking and
// pausing), and no loop is left behind.
func TestParkingPauseServeRace(t *testing.T) {
	backend := namedBackend(t, "b1")
	l := openTCP(t)
	base := runtime.NumGoroutine()
	o := parkOptions(backend)
	o.ParkAfter = time.Millisecond // park and wake as often as possible
	l.Serve(o)
	const clients, perClient = 4, 50
	errs := make(chan error, clients)
	for range clients {
		go func() {
			for i := range perClient {
				if got, err := ask(addrOf(l)); err != nil || got != "b1" {
					errs <- fmt.Errorf("connection %d: got %q, %w", i, got, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range 500 {
		if i%2 == 0 {
			l.Pause()
		} else {
			l.Serve(o)
		}
	}
	l.Serve(o)
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	awaitParked(t, l)
	awaitGoroutines(t, base+1, 5*time.Second) // the parking set's goroutine, if it started here
}

// Break on a parked listener wakes it, and its loop reports the failure,
// as for a listener that was running.
func TestBreakParkedListenerReportsFailure(t *testing.T) {
	l := openTCP(t)
	failed := make(chan error, 1)
	o := parkOptions(namedBackend(t, "b1"))
	o.OnFailure = func(_ ListenSpec, err error) { failed <- err }
	l.Serve(o)
	if parked, _ := l.state(); !parked {
		t.Fatal("not parked after Serve")
	}
	if err := l.Break(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err == nil || errors.Is(err, errIdle) {
			t.Fatalf("failure reported as %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a broken parked listener reported nothing in 5 s")
	}
}

// Closing a parked listener takes it out of the parking set; Pause and
// Serve after it do nothing.
func TestCloseParkedListener(t *testing.T) {
	l := openTCP(t)
	l.Serve(parkOptions(namedBackend(t, "b1")))
	l.Close()
	l.mu.Lock()
	registered := l.registered
	l.mu.Unlock()
	if registered {
		t.Fatal("closed listener still in the parking set")
	}
	l.Pause()
	l.Serve(parkOptions("127.0.0.1:1"))
	if parked, running := l.state(); parked || running {
		t.Fatalf("closed listener served: parked %v, loop running %v", parked, running)
	}
}

// A UDP socket parks too, and a datagram wakes it.
func TestParkedUDPListenerWakes(t *testing.T) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 100)
		for {
			n, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:n], from)
		}
	}()
	l, err := Open(ListenSpec{Network: "udp", Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.CloseFlows()
	defer l.Close()
	l.Serve(parkOptions(echo.LocalAddr().String()))
	for i := range 2 {
		if parked, _ := l.state(); !parked && i == 0 {
			t.Fatal("UDP listener not parked after Serve")
		}
		c, err := net.Dial("udp", addrOf(l))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("ping"))
		buf := make([]byte, 10)
		n, err := c.Read(buf)
		c.Close()
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("datagram %d: got %q, %v", i, buf[:n], err)
		}
		awaitParked(t, l)
	}
}

// Many served listeners hold about no goroutine each while idle, serve a
// connection each, and go back to none.
func TestManyParkedListenersHoldNoGoroutines(t *testing.T) {
	const n = 2000
	backend := namedBackend(t, "b1")
	theParkingSet()
	base := runtime.NumGoroutine()
	ls := make([]*Listener, n)
	for i := range ls {
		ls[i] = openTCP(t)
		ls[i].Serve(parkOptions(backend))
	}
	if g := runtime.NumGoroutine(); g > base+n/100 {
		t.Fatalf("%d goroutines for %d parked listeners (%d before)", g, n, base)
	}
	for i, l := range ls {
		if got, err := ask(addrOf(l)); err != nil || got != "b1" {
			t.Fatalf("listener %d: got %q, %v", i, got, err)
		}
	}
	awaitGoroutines(t, base+n/100, 10*time.Second)
}

// Keepalive for clients is on the listening socket before it is parked:
// the kernel gives a connection the listener's options when it completes
// the handshake, not at accept, so one queued while the listener was
// parked went without keepalive (e2e NftablesVanishedClient held a
// vanished client's connection for good).
func TestParkedListenerHasKeepAliveAlready(t *testing.T) {
	l := openTCP(t)
	o := parkOptions(namedBackend(t, "b"))
	o.TCPKeepAlive = 2 * time.Second
	l.Serve(o)
	rc, err := l.tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on, idle int
	var sockErr error
	rc.Control(func(fd uintptr) {
		if on, sockErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); sockErr == nil {
			idle, sockErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		}
	})
	if sockErr != nil {
		t.Fatal(sockErr)
	}
	if on != 1 || idle != 2 {
		t.Fatalf("parked listener: SO_KEEPALIVE %d, TCP_KEEPIDLE %d; want 1 and 2", on, idle)
	}
}
