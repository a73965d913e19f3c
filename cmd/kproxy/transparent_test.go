package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// The bind portal cannot dial from the client's address (no rules route
// the replies back): a service annotated kproxy.io/preserve-source-ip is
// served from the node's address, and the log says why, naming the
// service port and the mode.
func TestPreserveSourceIPBindModeLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.37.11:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	m := service("tpbind", "127.0.37.1", 18081, ln.Addr().(*net.TCPAddr).Port, "127.0.37.11")
	m = strings.Replace(m, "metadata: {name: tpbind, namespace: default}",
		`metadata: {name: tpbind, namespace: default, annotations: {kproxy.io/preserve-source-ip: "true"}}`, 1)
	in := startKproxy(t, m)
	in.waitListening(t, "default/tpbind:tcp/TCP", 1)
	c, err := net.DialTimeout("tcp", "127.0.37.1:18081", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("through kproxy: %q, %v; want the endpoint's answer", line, err)
	}
	want := `"servicePort":"default/tpbind:tcp/TCP","portal":"bind","message":"kproxy.io/preserve-source-ip needs a kernel portal mode (nftables, iptables): endpoints see the node's address"`
	deadline := time.Now().Add(5 * time.Second)
	for !in.logged(want) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %s:\n%s", want, in.logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the log: no event to await
	}
}
