package actors

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// A service port at its connection limit resets new connections; its held
// connections and every other service port go on; a freed slot is used
// again. UDP flows are bounded the same way, but a flow answered and
// idle gives its slot to a new client (conntrack's early drop; the drop
// itself is portal/datapath's TestUDPFlowLimitEvictsUnassured).
func TestLimitsBoundOneServicePortOnly(t *testing.T) {
	p := Start(Config{BindAddress: "127.0.0.1", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Limits: &datapath.Limits{ConnsPerServicePort: 3, FlowsPerServicePort: 2}})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	tcp := tcpBackends(t, 1)
	udp := udpBackends(t, 1)
	full := svcPort("full", messages.Protocol_TCP, "127.0.20.30", 18080)
	other := svcPort("other", messages.Protocol_TCP, "127.0.20.31", 18080)
	dns := svcPort("dns", messages.Protocol_UDP, "127.0.20.32", 18053)
	p.Submit(snapshot(1, spe(full, endpoints(tcp...)), spe(other, endpoints(tcp...)), spe(dns, endpoints(udp...))))
	for _, sp := range []*messages.ServicePort{full, other, dns} {
		w.listening(t, sp.GetKey().ID(), 1, 1)
	}

	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", "127.0.20.30:18080")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := readLine(c); err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
	}
	if err := refused(t, "127.0.20.30:18080"); err != nil {
		t.Fatal(err)
	}
	if got := dialName(t, "127.0.20.31:18080"); got != "backend-0" {
		t.Fatalf("another service port at the limit of the first: reached %q", got)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for refused(t, "127.0.20.30:18080") == nil { // the slot frees once the proxy sees the close
		if time.Now().After(deadline) {
			t.Fatal("a freed connection slot was never used again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range held[1:] {
		if _, err := c.Write([]byte("still\n")); err != nil {
			t.Fatalf("a held connection broke: %v", err)
		}
	}

	// UDP: two flows (client addresses) fit; a third client, one query
	// like a resolver's, takes the place of the idlest answered flow.
	var clients []*net.UDPConn
	for i := range 3 {
		c := dialUDP(t, "127.0.20.32:18053")
		clients = append(clients, c)
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if got := udpExchange(t, c, []byte("ping")); got == "" {
			t.Fatalf("UDP client %d at the limit of 2 flows, the others answered and idle: no answer", i)
		}
	}
	clients[2].SetDeadline(time.Now().Add(3 * time.Second))
	if got := udpExchange(t, clients[2], []byte("again")); got == "" {
		t.Fatal("a flow within the limit stopped answering")
	}
}

func readLine(c net.Conn) (string, error) {
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// refused is nil when a connection to addr is reset or closed without a
// byte (over the limit), an error when a backend answers.
func refused(t *testing.T, addr string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n == 0 && (errors.Is(err, io.EOF) || isReset(err)) {
		return nil
	}
	return errors.New("a connection over the limit was served")
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
