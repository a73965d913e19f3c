package main

import (
	"net"
	"testing"
)

// Every port of the first state opens before any serves; a port that
// cannot be opened (its address taken by another program) has reported
// that, so it holds nobody: the other service serves.
func TestStartNotHeldByAPortThatCannotOpen(t *testing.T) {
	port := backendsOn(t, "127.0.38.11")
	// Another program's socket, without SO_REUSEPORT: kproxy's bind fails.
	taken, err := net.Listen("tcp", "127.0.38.1:18080")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	in := startKproxy(t, service("taken", "127.0.38.1", 18080, port, "127.0.38.11")+service("free", "127.0.38.2", 18080, port, "127.0.38.11"))
	in.waitListening(t, "default/free:tcp/TCP", 1)
	name, err := tryReadName("127.0.38.2:18080")
	if err != nil || name != "127.0.38.11" {
		t.Fatalf("the free port: %q, %v; want 127.0.38.11", name, err)
	}
}
