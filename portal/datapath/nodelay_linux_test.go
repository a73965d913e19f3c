package datapath

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// An endpoint that writes its answer in small pieces a moment apart (a
// server writing headers, then the body) reaches the client through the
// loops without waiting on the client's delayed ACK (40 ms at least on
// Linux): Nagle's algorithm would hold each piece until the last one is
// acknowledged.
func TestLoopsSendSmallPiecesAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					for _, piece := range []string{"head", "body", "end\n"} {
						c.Write([]byte(piece))
						time.Sleep(2 * time.Millisecond) // apart, as a server's writes
					}
				}
			}()
		}
	}()
	// The service port's socket as kproxy opens it: a connection queued
	// before the loops serve it is accepted with what it was opened with.
	l, err := Open(ListenSpec{Network: "tcp", Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.tcp.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	endpoint := ln.Addr().String()
	p := &TCPProxy{Conns: NewConnTracker(), EventLoops: true,
		Picker: PickerFunc(func(string, []string, bool) (string, error) { return endpoint, nil })}
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(l.tcp, nil) }()
	defer func() { l.Close(); <-served }()
	r := bufio.NewReader(c)
	const exchanges = 20
	held := 0
	for range exchanges {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		t0 := time.Now()
		if _, err := c.Write([]byte("ask\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if time.Since(t0) >= 40*time.Millisecond {
			held++
		}
	}
	// Without TCP_NODELAY nearly every exchange waits for a delayed ACK;
	// a loaded machine may hold up a few.
	if held > exchanges/2 {
		t.Errorf("%d of %d exchanges took 40 ms or more (a delayed ACK): the client's socket holds small writes", held, exchanges)
	}
}
