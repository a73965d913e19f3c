package datapath

import (
	"net"
	"testing"
	"time"
)

// While a set's start is held, a parked listener's connection completes in
// the kernel and waits unaccepted; StartServing serves it, and a listener
// parked after serves at once. Another set is not held.
func TestHoldServingUntilStartServing(t *testing.T) {
	backend := namedBackend(t, "b1")
	set := NewListeners()
	set.HoldServing()
	open := func(set *Listeners, owner, ip string) *Listener {
		sockets := set.Sockets(owner)
		l, err := sockets.Open(ListenSpec{Network: "tcp", Address: ip + ":0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sockets.Close)
		l.Serve(parkOptions(backend))
		return l
	}
	l := open(set, "held", "127.0.0.1")
	other := open(NewListeners(), "not-held", "127.0.0.2")
	if got, err := ask(addrOf(other)); err != nil || got != "b1" {
		t.Fatalf("a set that is not held: %q, %v; want b1", got, err)
	}

	c, err := net.Dial("tcp", addrOf(l))
	if err != nil {
		t.Fatal(err) // the kernel completes the handshake into the backlog
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); n != 0 || !isTimeout(err) {
		t.Fatalf("a held listener served a connection: read %d bytes, %v", n, err)
	}
	if parked, running := l.state(); !parked || running {
		t.Fatalf("while held: parked %v, loop running %v; want parked, no loop", parked, running)
	}
	set.StartServing()
	set.StartServing() // a second call does nothing
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "b1" {
		t.Fatalf("after StartServing: read %q, %v; want b1", buf[:n], err)
	}
	if got, err := ask(addrOf(open(set, "later", "127.0.0.3"))); err != nil || got != "b1" {
		t.Fatalf("a listener opened after StartServing: %q, %v; want b1", got, err)
	}
}
