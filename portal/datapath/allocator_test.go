package datapath

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PortRange
		err  bool
	}{
		{"", PortRange{}, false},
		{"30000-30009", PortRange{30000, 10}, false},
		{"30000+9", PortRange{30000, 10}, false},
		{"30010-30000", PortRange{}, true},
		{"0-10", PortRange{}, true},
		{"65535-65536", PortRange{}, true},
		{"abc", PortRange{}, true},
		{"1-x", PortRange{}, true},
	} {
		got, err := ParsePortRange(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestAllocatorRangeSkipsTakenAndExhausts(t *testing.T) {
	// Find three consecutive free ports, then occupy the middle one.
	var base int
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base < 65000 {
			break
		}
	}
	taken, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1)))
	if err != nil {
		t.Skipf("port %d busy: %v", base+1, err)
	}
	defer taken.Close()

	a := NewPortAllocator("127.0.0.1", PortRange{Base: base, Size: 3})
	got := map[int]bool{}
	for range 2 {
		p, err := a.Allocate("tcp")
		if err != nil {
			t.Fatal(err)
		}
		if p == base+1 {
			t.Fatalf("allocated port %d held by another socket", p)
		}
		if p < base || p > base+2 || got[p] {
			t.Fatalf("bad port %d (have %v)", p, got)
		}
		got[p] = true
	}
	if _, err := a.Allocate("tcp"); err == nil {
		t.Fatal("want range exhausted")
	}
	a.Release("tcp", base)
	if p, err := a.Allocate("tcp"); err != nil || p != base {
		t.Fatalf("after release: %d, %v", p, err)
	}
}

func TestAllocatorAnyPort(t *testing.T) {
	a := NewPortAllocator("127.0.0.1", PortRange{})
	p1, err := a.Allocate("udp")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := a.Allocate("udp")
	if err != nil || p1 == p2 || p1 == 0 {
		t.Fatalf("ports %d %d err %v", p1, p2, err)
	}
}

// TCP and UDP are separate port spaces: a range of one port serves a TCP
// and a UDP service port at once.
func TestAllocatorPoolsPerProtocol(t *testing.T) {
	base := 20000 + rand.IntN(12000) // below the ephemeral range (32768-)
	a := NewPortAllocator("127.0.0.1", PortRange{Base: base, Size: 1})
	tcp, err := a.Allocate("tcp")
	if err != nil {
		t.Skipf("port %d busy: %v", base, err)
	}
	udp, err := a.Allocate("udp")
	if err != nil {
		t.Fatalf("UDP after TCP on a one-port range: %v", err)
	}
	if tcp != base || udp != base {
		t.Fatalf("ports %d/tcp and %d/udp, want %d for both", tcp, udp, base)
	}
	if _, err := a.Allocate("udp"); !errors.Is(err, ErrPortRangeExhausted) {
		t.Fatalf("second UDP = %v, want exhausted", err)
	}
	a.Release("udp", base)
	if _, err := a.Allocate("udp"); err != nil {
		t.Fatalf("UDP after its release: %v", err)
	}
}

// An allocated port is held by the socket its Portal will serve: nothing
// else can bind it meanwhile, the Portal's Open takes that socket over
// (no second one), and a port released before a Portal took it is free
// again.
func TestAllocatorHoldsThePortUntilThePortalTakesIt(t *testing.T) {
	ls := NewListeners()
	a := NewPortAllocator("127.0.0.1", PortRange{})
	a.Attach(ls, ModeNetsh)
	port, err := a.Allocate("tcp")
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if c, err := net.Listen("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("port %d allocated but free for anyone to bind", port)
	}
	spec := ProxySpec("tcp", ModeNetsh, "127.0.0.1", port, false)
	owner := ls.Sockets("owner")
	l, err := owner.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Len() != 1 || l.Spec != spec {
		t.Fatalf("%d sockets, spec %+v: want the allocator's one, taken over", ls.Len(), l.Spec)
	}
	a.Release("tcp", port) // the Portal's socket is its own now
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("the Portal's socket closed by Release: %v", err)
	}
	c.Close()
	owner.Close()

	port, err = a.Allocate("udp")
	if err != nil {
		t.Fatal(err)
	}
	a.Release("udp", port)
	if ls.Len() != 0 {
		t.Fatalf("%d sockets left after a release before any Portal took the port", ls.Len())
	}
	pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("released port still held: %v", err)
	}
	pc.Close()
}
