package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
)

func TestLiveReload(t *testing.T) {
	port := backendsOn(t, "127.0.30.11", "127.0.30.12", "127.0.30.13")
	a := service("alpha", "127.0.30.1", 18080, port, "127.0.30.11")
	b := service("beta", "127.0.30.2", 18080, port, "127.0.30.12")
	in := startKproxy(t, a+b)
	in.waitListening(t, "default/alpha:tcp/TCP", 1)
	in.waitListening(t, "default/beta:tcp/TCP", 1)
	if got := readName(t, "127.0.30.1:18080"); got != "127.0.30.11" {
		t.Fatalf("alpha reached %s", got)
	}

	// An established connection through alpha, mid-conversation.
	held, err := net.Dial("tcp", "127.0.30.1:18080")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(20 * time.Second))
	heldReader := bufio.NewReader(held)
	if name, err := backends.ReadName(heldReader); err != nil || name != "127.0.30.11" {
		t.Fatalf("held connection: %q %v", name, err)
	}

	// Change alpha (swap its endpoint), remove beta, add gamma.
	a2 := service("alpha", "127.0.30.1", 18080, port, "127.0.30.13")
	g := service("gamma", "127.0.30.3", 18080, port, "127.0.30.12")
	in.write(t, a2+g)
	in.waitFor(t, "beta deleted", func(m map[string]*messages.ServicePortState) bool {
		return m["default/beta:tcp/TCP"].GetDeleted()
	})
	in.waitListening(t, "default/gamma:tcp/TCP", 1)
	in.waitFor(t, "alpha updated", func(m map[string]*messages.ServicePortState) bool {
		eps := m["default/alpha:tcp/TCP"].GetEndpoints()
		return len(eps) == 1 && eps[0].GetIps()[0] == "127.0.30.13"
	})
	if got := readName(t, "127.0.30.1:18080"); got != "127.0.30.13" {
		t.Fatalf("alpha after update reached %s", got)
	}
	if got := readName(t, "127.0.30.3:18080"); got != "127.0.30.12" {
		t.Fatalf("gamma reached %s", got)
	}
	if c, err := net.DialTimeout("tcp", "127.0.30.2:18080", time.Second); err == nil {
		c.Close()
		t.Fatal("beta still accepts after deletion")
	}

	// The connection established before the update still works both ways.
	if _, err := io.WriteString(held, "still here\n"); err != nil {
		t.Fatalf("held connection write: %v", err)
	}
	line, err := heldReader.ReadString('\n')
	if err != nil || line != "still here\n" {
		t.Fatalf("held connection echo: %q %v", line, err)
	}

	// A bad document is reported and ignored: gamma's Service gets an unknown
	// protocol, a new service delta is fine. gamma keeps serving as it was,
	// alpha is untouched, delta is added.
	badGamma := strings.Replace(g, "{name: tcp, port: 18080,", "{name: tcp, protocol: ICMP, port: 18080,", 1)
	if badGamma == g {
		t.Fatal("test bug: replacement did not apply")
	}
	d := service("delta", "127.0.30.4", 18080, port, "127.0.30.11")
	in.write(t, a2+badGamma+d)
	in.waitListening(t, "default/delta:tcp/TCP", 1)
	if got := readName(t, "127.0.30.3:18080"); got != "127.0.30.12" {
		t.Fatalf("gamma after a bad edit reached %s", got)
	}
	if got := readName(t, "127.0.30.1:18080"); got != "127.0.30.13" {
		t.Fatalf("alpha after a bad edit reached %s", got)
	}
	logs := in.logs.String()
	if !strings.Contains(logs, "ICMP") || !strings.Contains(logs, "Service default/gamma") {
		t.Fatalf("bad document not reported clearly; logs:\n%s", logs)
	}
}
