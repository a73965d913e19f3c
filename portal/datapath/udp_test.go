package datapath

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// udpEcho answers every datagram with itself, one read and one write at a
// time, until closed.
func udpEcho(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, MaxDatagram)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return c
}

// serveUDP runs a UDPProxy on a fresh loopback socket with picker until
// the test ends; a panic that escapes Serve is reported, not fatal to
// the test binary.
func serveUDP(t *testing.T, picker Picker, stats *Stats, limits *Limits, before func(addr *net.UDPAddr)) *UDPProxy {
	t.Helper()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	// Whatever before sends waits in the socket's queue: the first read
	// finds a burst, as under load.
	before(ln.LocalAddr().(*net.UDPAddr))
	p := &UDPProxy{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Serve panicked: %v", r)
			}
		}()
		p.Serve(ln, UDPOptions{Picker: picker, Stats: stats, Limits: limits}, nil)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.CloseFlows()
	})
	return p
}

// numbered is datagram i of a burst: 64 bytes, the number first.
func numbered(i int) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

// expectEchoes reads n echoes on c and checks they are 0..n-1 in order.
func expectEchoes(t *testing.T, c *net.UDPConn, n int) {
	t.Helper()
	buf := make([]byte, MaxDatagram)
	for want := range n {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("echo %d of %d: %v", want, n, err)
		}
		if got := binary.BigEndian.Uint64(buf[:k]); k != 64 || got != uint64(want) {
			t.Fatalf("echo %d: got datagram %d (%d bytes): reordered or lost", want, got, k)
		}
	}
}

// udpBurst is a burst that the kernel's default socket buffers hold
// whole on loopback (each small datagram is charged about 1 KiB against
// the 208 KiB default of net.core.rmem_default), so no loss is the
// proxy's to cause.
const udpBurst = 128

// A burst of datagrams is carried in order and whole, and, where the
// platform batches, many datagrams go per system call both ways.
func TestUDPBurstInOrderBatched(t *testing.T) {
	backend := udpEcho(t)
	client, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	stats := &Stats{}
	picker := PickerFunc(func(string, []string, bool) (string, error) { return backend.LocalAddr().String(), nil })
	serveUDP(t, picker, stats, nil, func(addr *net.UDPAddr) {
		for i := range udpBurst {
			if _, err := client.WriteToUDP(numbered(i), addr); err != nil {
				t.Fatal(err)
			}
		}
	})
	expectEchoes(t, client, udpBurst)
	// The last batch each way is counted once its send returns, maybe
	// after the client has its echoes (the endpoint may echo a batch
	// before the send that carried it to it returns).
	counted := func() bool {
		return stats.UDP().ToClient.Sent.Load() >= udpBurst && stats.UDP().ToEndpoint.Sent.Load() >= udpBurst
	}
	for deadline := time.Now().Add(5 * time.Second); !counted() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling a counter nothing announces
	}
	in, out := &stats.UDP().ToEndpoint, &stats.UDP().ToClient
	recv, recvCalls := in.Received.Load()+out.Received.Load(), in.ReceiveCalls.Load()+out.ReceiveCalls.Load()
	sent, sendCalls := in.Sent.Load()+out.Sent.Load(), in.SendCalls.Load()+out.SendCalls.Load()
	t.Logf("received %d datagrams in %d calls, sent %d in %d", recv, recvCalls, sent, sendCalls)
	if recv != 2*udpBurst || sent != 2*udpBurst {
		t.Errorf("counted %d received and %d sent, want %d each (a burst each way)", recv, sent, 2*udpBurst)
	}
	if !batched {
		return
	}
	// The burst was queued before the first read: the reads after the
	// first take batches, and the flow's share of each goes to the
	// endpoint in one call.
	if n, calls := in.Received.Load(), in.ReceiveCalls.Load(); calls >= n {
		t.Errorf("%d client datagrams read in %d system calls: no batching", n, calls)
	}
	if n, calls := in.Sent.Load(), in.SendCalls.Load(); calls >= n {
		t.Errorf("%d datagrams sent to the endpoint in %d system calls: no batching", n, calls)
	}
}

// Many clients' bursts interleaved in one batch each reach their own
// client, in order.
func TestUDPInterleavedClientsInOrder(t *testing.T) {
	backend := udpEcho(t)
	const clients = 8
	var cs []*net.UDPConn
	for range clients {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	picker := PickerFunc(func(string, []string, bool) (string, error) { return backend.LocalAddr().String(), nil })
	stats := &Stats{}
	p := serveUDP(t, picker, stats, nil, func(addr *net.UDPAddr) {
		for i := range udpBurst / clients {
			for _, c := range cs {
				if _, err := c.WriteToUDP(numbered(i), addr); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { expectEchoes(t, c, udpBurst/clients) })
	}
	wg.Wait()
	p.mu.Lock()
	flows := len(p.flows)
	p.mu.Unlock()
	if flows != clients {
		t.Errorf("%d flows, want one per client (%d)", flows, clients)
	}
}

// A panic while starting one client's flow drops that client's datagrams
// only: the others read in the same batch are carried, and the flow
// limit's slot taken for the failed flow is given back.
func TestUDPPanicInOneFlowSparesTheBatch(t *testing.T) {
	backend := udpEcho(t)
	bad, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	good, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	picker := PickerFunc(func(clientIP string, _ []string, _ bool) (string, error) {
		if clientIP == "127.0.0.2" {
			panic(fmt.Sprintf("picker fails for %s", clientIP))
		}
		return backend.LocalAddr().String(), nil
	})
	limits := &Limits{}
	stats := &Stats{}
	const n = 16
	serveUDP(t, picker, stats, limits, func(addr *net.UDPAddr) {
		for i := range n {
			bad.WriteToUDP(numbered(i), addr)
			good.WriteToUDP(numbered(i), addr)
		}
	})
	expectEchoes(t, good, n)
	if _, flows, _, _ := limits.Counts(); flows != 1 {
		t.Errorf("%d flows held, want 1 (the failed client's slots given back)", flows)
	}
	if a := stats.ActiveFlows.Load(); a != 1 {
		t.Errorf("%d active flows counted, want 1", a)
	}
}

// At its flow limit, a service port gives a new client the slot of its
// idlest flow that is not assured (answered and still in use 2 s after it
// started), as conntrack's early drop does when its table is full: one
// query and its answer (DNS) holds a slot no longer than the next client
// needs it. Flows that are assured keep theirs: the new client is dropped.
func TestUDPFlowLimitEvictsUnassured(t *testing.T) {
	backend := udpEcho(t)
	stats := &Stats{}
	limits := &Limits{FlowsPerServicePort: 2}
	picker := PickerFunc(func(string, []string, bool) (string, error) { return backend.LocalAddr().String(), nil })
	var addr *net.UDPAddr
	serveUDP(t, picker, stats, limits, func(a *net.UDPAddr) { addr = a })
	ask := func(c *net.UDPConn, i int) error {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.WriteToUDP(numbered(i), addr); err != nil {
			return err
		}
		buf := make([]byte, 100)
		_, err := c.Read(buf)
		return err
	}
	client := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range 5 { // one query each, as resolvers send them
		if err := ask(client(), i); err != nil {
			t.Fatalf("client %d, at the limit of 2 flows answered once each: %v", i, err)
		}
	}
	if n := stats.ActiveFlows.Load(); n > 2 {
		t.Fatalf("%d flows held, want at most the limit 2", n)
	}
	// Every flow assured: nothing to evict, a new client is dropped.
	defer udpAssuredAfter.Store(udpAssuredAfter.Swap(0))
	if err := ask(client(), 5); err == nil {
		t.Fatal("a new client was answered while every held flow is assured")
	}
}

// A UDP socket no longer read (a hand-over's drain) is done once its
// flows have ended, not at the end of the TCP drain: Drained says when,
// so the socket leaves its SO_REUSEPORT group at once (a socket the next
// process binds there later must not share datagrams with an unread one).
func TestUDPDrainedOnceFlowsEnd(t *testing.T) {
	echo := udpEcho(t)
	picker := PickerFunc(func(string, []string, bool) (string, error) { return echo.LocalAddr().String(), nil })
	var addr *net.UDPAddr
	p := serveUDP(t, picker, nil, nil, func(a *net.UDPAddr) { addr = a })
	c, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(numbered(0)); err != nil {
		t.Fatal(err)
	}
	expectEchoes(t, c, 1) // the flow exists
	p.Drain()
	select {
	case <-p.Drained():
		t.Fatal("drained while a flow waits")
	default:
	}
	p.CloseFlows() // the flow ends (as after UDPDrainIdle without answers)
	select {
	case <-p.Drained():
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after its last flow ended")
	}

	idle := &UDPProxy{}
	idle.Drain()
	select {
	case <-idle.Drained():
	default:
		t.Fatal("a socket without flows is not drained at once")
	}
}
