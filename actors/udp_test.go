package actors

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// udpExchange sends one datagram on c and returns the reply.
func udpExchange(t *testing.T, c *net.UDPConn, payload []byte) string {
	t.Helper()
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 70*1024)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

func dialUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", addr)
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUDPClientsGetTheirOwnReplies(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := udpBackends(t, 2)
	p.Submit(snapshot(1, spe(svcPort("dns", messages.Protocol_UDP, "127.0.21.1", 18053), endpoints(addrs...))))
	w.listening(t, key("dns", messages.Protocol_UDP).ID(), 1, 1)

	const clients, rounds = 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ra, _ := net.ResolveUDPAddr("udp", "127.0.21.1:18053")
			c, err := net.DialUDP("udp", nil, ra)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			backend := ""
			buf := make([]byte, 1024)
			for r := range rounds {
				msg := fmt.Sprintf("client-%d-round-%d", i, r)
				c.Write([]byte(msg))
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				n, err := c.Read(buf)
				if err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
					return
				}
				name, body, _ := strings.Cut(string(buf[:n]), ":")
				if body != msg {
					errs <- fmt.Errorf("client %d got %q, want its own %q", i, body, msg)
					return
				}
				// A flow sticks to one endpoint.
				if backend != "" && name != backend {
					errs <- fmt.Errorf("client %d moved from %s to %s", i, backend, name)
					return
				}
				backend = name
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUDPLargeDatagram(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := udpBackends(t, 1)
	p.Submit(snapshot(1, spe(svcPort("big", messages.Protocol_UDP, "127.0.21.2", 18053), endpoints(addrs...))))
	w.listening(t, key("big", messages.Protocol_UDP).ID(), 1, 1)

	c := dialUDP(t, "127.0.21.2:18053")
	payload := bytes.Repeat([]byte{'z'}, 60*1024)
	if got := udpExchange(t, c, payload); got != "backend-0:"+string(payload) {
		t.Fatalf("60 KiB datagram: got %d bytes back, want %d", len(got), len(payload)+10)
	}
}

func TestUDPIdleFlowsReaped(t *testing.T) {
	p := Start(Config{BindAddress: "127.0.0.1", UDPIdleTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { p.Stop(t.Context()) })
	w := watchState(t, p)
	addrs := udpBackends(t, 1)
	p.Submit(snapshot(1, spe(svcPort("idle", messages.Protocol_UDP, "127.0.21.3", 18053), endpoints(addrs...))))
	w.listening(t, key("idle", messages.Protocol_UDP).ID(), 1, 1)

	for range 5 {
		c := dialUDP(t, "127.0.21.3:18053")
		udpExchange(t, c, []byte("hi"))
	}
	if n := p.Conns.Len(); n != 5 {
		t.Fatalf("want 5 live flows, got %d", n)
	}
	// Flows end by themselves after the idle timeout.
	deadline := time.Now().Add(3 * time.Second)
	for p.Conns.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d flows still live after idle timeout", p.Conns.Len())
		}
		time.Sleep(20 * time.Millisecond) // polling a counter: no event exists for a flow's end
	}
}

func TestUDPServiceUpdateKeepsLiveFlow(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := udpBackends(t, 3)
	sp := svcPort("keep", messages.Protocol_UDP, "127.0.21.4", 18053)
	p.Submit(snapshot(1, spe(sp, endpoints(addrs[:2]...))))
	w.listening(t, sp.GetKey().ID(), 1, 1)

	c := dialUDP(t, "127.0.21.4:18053")
	first, _, _ := strings.Cut(udpExchange(t, c, []byte("a")), ":")

	// Add an endpoint and an external IP: the flow's endpoint stays, so the flow lives on.
	sp2 := svcPort("keep", messages.Protocol_UDP, "127.0.21.4", 18053)
	sp2.ExternalIps = &messages.IPSet{V4: []string{"127.0.21.5"}}
	p.Submit(snapshot(2, spe(sp2, endpoints(addrs...))))
	w.listening(t, sp.GetKey().ID(), 2, 2)
	for range 10 {
		if got, _, _ := strings.Cut(udpExchange(t, c, []byte("b")), ":"); got != first {
			t.Fatalf("flow moved from %s to %s after a service update", first, got)
		}
	}

	// Remove the flow's endpoint: the flow ends and the next datagram starts
	// a new flow to a remaining endpoint.
	var keep []string
	for i, a := range addrs {
		if fmt.Sprintf("backend-%d", i) != first {
			keep = append(keep, a)
		}
	}
	p.Submit(snapshot(3, spe(sp2, endpoints(keep...))))
	st := w.listening(t, sp.GetKey().ID(), 2, 3)
	// The ServicePort reports before its Portal has handled the new
	// endpoints; a request to the Portal is answered after it has.
	portalPID := actor.NewPID(p.System.Address(), st.GetActorId()+"/portal")
	if _, err := p.System.Root.RequestFuture(portalPID, &messages.GetState{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := strings.Cut(udpExchange(t, c, []byte("c")), ":"); got == first {
		t.Fatalf("flow still goes to removed endpoint %s", first)
	}
}
