package actors

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
)

func dialName(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := backends.ReadName(bufio.NewReader(c))
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return name
}

func TestTCPRoundRobinSpread(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 3)
	p.Submit(snapshot(1, spe(svcPort("rr", messages.Protocol_TCP, "127.0.20.1", 18080), endpoints(addrs...))))
	w.listening(t, key("rr", messages.Protocol_TCP).ID(), 1, 1)

	counts := map[string]int{}
	for range 300 {
		counts[dialName(t, "127.0.20.1:18080")]++
	}
	if len(counts) != 3 {
		t.Fatalf("want 3 backends used, got %v", counts)
	}
	for name, n := range counts {
		if n < 90 || n > 110 {
			t.Errorf("backend %s got %d of 300 connections, want 100±10%%", name, n)
		}
	}
}

// The bind portal opens one socket per service address and nothing else:
// no proxy port is allocated and no proxy-port listener is opened.
func TestTCPBindModeOneSocketPerAddress(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	p.Submit(snapshot(1, spe(svcPort("pp", messages.Protocol_TCP, "127.0.20.2", 18080), endpoints(addrs...))))
	st := w.listening(t, key("pp", messages.Protocol_TCP).ID(), 1, 1)
	if st.GetProxyPort() != 0 || st.GetListenAddresses()[0] != "127.0.20.2:18080" {
		t.Fatalf("proxy port %d, listening on %v; want no proxy port and only 127.0.20.2:18080", st.GetProxyPort(), st.GetListenAddresses())
	}
	if n := p.Listeners.Len(); n != 1 {
		t.Fatalf("%d sockets open for one service address, want 1", n)
	}
	if got := dialName(t, "127.0.20.2:18080"); got != "backend-0" {
		t.Fatalf("service address reached %q", got)
	}
}

func TestTCPSessionAffinityPinsAndExpires(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 3)
	sp := svcPort("aff", messages.Protocol_TCP, "127.0.20.3", 18080)
	sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
	sp.AffinityTimeoutSeconds = 1
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	w.listening(t, sp.GetKey().ID(), 1, 1)

	first := dialName(t, "127.0.20.3:18080")
	for range 20 {
		if got := dialName(t, "127.0.20.3:18080"); got != first {
			t.Fatalf("affinity broken: first %s, then %s", first, got)
		}
	}
	// After the 1 s timeout without use the pin is gone: new connections
	// follow round-robin again, so several backends are seen.
	// The sleeps wait out the timeout under test, they synchronise nothing.
	seen := map[string]bool{first: true}
	for range 3 {
		time.Sleep(1100 * time.Millisecond)
		seen[dialName(t, "127.0.20.3:18080")] = true
		if len(seen) > 1 {
			break
		}
	}
	if len(seen) < 2 {
		t.Fatalf("affinity never expired: only %v", seen)
	}
}

func TestTCPDeadEndpointFastRetry(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	// A dead endpoint: a port nobody listens on (connection refused at once).
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	p.Submit(snapshot(1, spe(svcPort("dead", messages.Protocol_TCP, "127.0.20.4", 18080), endpoints(append(addrs, deadAddr)...))))
	w.listening(t, key("dead", messages.Protocol_TCP).ID(), 1, 1)

	for range 30 {
		start := time.Now()
		name := dialName(t, "127.0.20.4:18080")
		if !strings.HasPrefix(name, "backend-") {
			t.Fatalf("got %q", name)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("connection took %v with a dead endpoint", d)
		}
	}
}

func TestTCPStalledEndpointDoesNotStallAccept(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	stalled := blackhole(t)
	p.Submit(snapshot(1, spe(svcPort("stall", messages.Protocol_TCP, "127.0.20.5", 18080), endpoints(addrs[0], stalled))))
	w.listening(t, key("stall", messages.Protocol_TCP).ID(), 1, 1)

	// Half the connections first try the stalled endpoint and wait out one
	// dial timeout (250 ms). Served one after another on the accept path
	// they would take 20 × 250 ms; dialled off the accept path they overlap.
	const n = 20
	start := time.Now()
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := net.DialTimeout("tcp", "127.0.20.5:18080", 2*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(3 * time.Second))
			name, err := backends.ReadName(bufio.NewReader(c))
			if err == nil && name != "backend-0" {
				err = errors.New("reached " + name)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%d connections with a stalled endpoint took %v", n, d)
	}
}

// blackhole returns a loopback address whose handshakes never complete: a
// listener with a full backlog that nobody accepts from drops SYNs.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
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
	addr := net.JoinHostPort("127.0.0.1", itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the backlog.
	for range 2 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Skip("kernel completes handshakes beyond the backlog here; cannot build a blackhole")
	}
	return addr
}

func TestTCPHalfClose(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	p.Submit(snapshot(1, spe(svcPort("half", messages.Protocol_TCP, "127.0.20.6", 18080), endpoints(addrs...))))
	w.listening(t, key("half", messages.Protocol_TCP).ID(), 1, 1)

	c, err := net.Dial("tcp", "127.0.20.6:18080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	payload := strings.Repeat("x", 1<<20)
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	// Shut our write side: the backend sees EOF, echoes everything, then closes.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "backend-0\n" + payload; string(got) != want {
		t.Fatalf("reply: got %d bytes, want %d", len(got), len(want))
	}
}

func TestTCPNoEndpointsResets(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	p.Submit(snapshot(1, spe(svcPort("empty", messages.Protocol_TCP, "127.0.20.7", 18080), nil)))
	w.listening(t, key("empty", messages.Protocol_TCP).ID(), 1, 1)

	// The reset can arrive before connect(2) returns or on the first read.
	c, err := net.Dial("tcp", "127.0.20.7:18080")
	if err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("want connection reset, got %v", err)
	}
}
