package actors

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/test/backends"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// A listener failure reported by the accept goroutine makes the Portal
// crash; its supervisor restarts it alone, on the same addresses and proxy
// port, and the service port serves again. A stale report from the old
// incarnation is ignored.
func TestPortalRestartKeepsAddresses(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("restart", messages.Protocol_TCP, "127.0.22.1", 18080)
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	before := w.listening(t, sp.GetKey().ID(), 1, 1)
	dialName(t, "127.0.22.1:18080")

	portalPID := actor.NewPID(p.System.Address(), before.GetActorId()+"/portal")
	oldIncarnation := incarnations.Load()
	p.System.Root.Send(portalPID, &messages.ListenerFailed{Incarnation: oldIncarnation, Address: "127.0.22.1:18080", Failure: &messages.Failure{Message: "injected"}})

	var after *messages.ServicePortState
	w.wait(t, "portal restarted and listening", func(m map[string]*messages.ServicePortState) bool {
		after = m[sp.GetKey().ID()]
		return after.GetRestarts() == 1 && incarnations.Load() > oldIncarnation && len(after.GetListenAddresses()) == 1
	})
	if after.GetProxyPort() != 0 || before.GetProxyPort() != 0 {
		t.Fatalf("the bind portal took proxy ports %d, %d", before.GetProxyPort(), after.GetProxyPort())
	}
	for i, a := range before.GetListenAddresses() {
		if after.GetListenAddresses()[i] != a {
			t.Fatalf("listen addresses changed: %v -> %v", before.GetListenAddresses(), after.GetListenAddresses())
		}
	}
	dialName(t, "127.0.22.1:18080")

	// A late report from the dead incarnation must not crash the new one.
	current := incarnations.Load()
	p.System.Root.Send(portalPID, &messages.ListenerFailed{Incarnation: oldIncarnation, Address: "127.0.22.1:18080", Failure: &messages.Failure{Message: "stale"}})
	// Mailbox order: this request is answered after the stale report is handled.
	res, err := p.System.Root.RequestFuture(portalPID, &messages.GetState{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(*messages.ListenerReady); got.GetIncarnation() != current || len(got.GetAddresses()) != 1 {
		t.Fatalf("stale failure disturbed the portal: incarnation %d (want %d), addresses %v", got.GetIncarnation(), current, got.GetAddresses())
	}
	dialName(t, "127.0.22.1:18080")
}

// A port held by another process: the Portal reports the error and retries
// with backoff (a bounded number of attempts, not a spin), other service
// ports are unaffected, and it recovers once the port is released.
func TestPortClashBacksOffAndRecovers(t *testing.T) {
	logged := &logCounter{}
	p := Start(Config{BindAddress: "127.0.0.1", Log: zerolog.New(io.MultiWriter(logged, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	squatter, err := net.Listen("tcp", "127.0.23.1:18080")
	if err != nil {
		t.Fatal(err)
	}
	clash := svcPort("clash", messages.Protocol_TCP, "127.0.23.1", 18080)
	other := svcPort("other", messages.Protocol_TCP, "127.0.23.2", 18080)
	p.Submit(snapshot(1, spe(clash, endpoints(addrs...)), spe(other, endpoints(addrs...))))
	var reported *messages.ServicePortState
	w.wait(t, "clash reported", func(m map[string]*messages.ServicePortState) bool {
		reported = m[clash.GetKey().ID()]
		return strings.Contains(reported.GetError(), "address already in use")
	})
	if f := reported.GetFailures(); len(f) != 1 || f[0].GetCode() != messages.FailureCode_ADDRESS_IN_USE || "["+f[0].GetMessage()+"]" != reported.GetError() {
		t.Fatalf("clash: want one ADDRESS_IN_USE failure with the error's text, got %v (error %q)", f, reported.GetError())
	}
	w.listening(t, other.GetKey().ID(), 1, 1)
	if got := dialName(t, "127.0.23.2:18080"); got != "backend-0" {
		t.Fatalf("other service port: %q", got)
	}
	// Over two seconds, backoff (100 ms doubling) allows a handful of
	// tries; the error is logged once, the retries that fail the same way
	// only at debug level.
	time.Sleep(2 * time.Second) // the backoff schedule is what is measured
	if n := logged.count("portal still failing, retrying"); n < 2 || n > 8 {
		t.Fatalf("%d bind retries in 2 s: want a few, backing off", n)
	}
	if n := logged.count("cannot open portal, retrying"); n != 1 {
		t.Fatalf("the port clash was logged as an error %d times, want once", n)
	}
	if st, _ := p.State(5 * time.Second); st.GetServicePorts()[0].GetRestarts() != 0 {
		t.Fatalf("a port clash should not crash-loop the Portal: %d restarts", st.GetServicePorts()[0].GetRestarts())
	}
	squatter.Close()
	w.wait(t, "clash recovered", func(m map[string]*messages.ServicePortState) bool {
		st := m[clash.GetKey().ID()]
		return st.GetError() == "" && len(st.GetFailures()) == 0 && len(st.GetListenAddresses()) == 1
	})
	if got := dialName(t, "127.0.23.1:18080"); got != "backend-0" {
		t.Fatalf("recovered service port: %q", got)
	}
}

// Balancer and Affinity crashes lose no endpoints, and pinned clients stay pinned.
func TestBalancerAndAffinityCrashKeepState(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 3)
	sp := svcPort("sticky", messages.Protocol_TCP, "127.0.23.3", 18080)
	sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
	sp.AffinityTimeoutSeconds = 3600
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	w.listening(t, sp.GetKey().ID(), 1, 1)
	pinned := dialName(t, "127.0.23.3:18080")

	for i, role := range []string{roleBalancer, roleAffinity, roleBalancer, roleAffinity} {
		if err := p.Crash(sp.GetKey().ID(), role, "test"); err != nil {
			t.Fatal(err)
		}
		w.wait(t, role+" restarted", func(m map[string]*messages.ServicePortState) bool {
			return m[sp.GetKey().ID()].GetRestarts() == int32(i+1)
		})
		for range 5 {
			if got := dialName(t, "127.0.23.3:18080"); got != pinned {
				t.Fatalf("after %s crash: client moved from %s to %s", role, pinned, got)
			}
		}
	}
	// All three endpoints are still there: a new client IP is spread over them.
	seen := map[string]bool{}
	for i := range 30 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 99, byte(i+1))}}
		c, err := d.Dial("tcp", "127.0.23.3:18080")
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		name, err := backends.ReadName(bufio.NewReader(c))
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after crashes, clients reach only %v", seen)
	}
}

// logCounter counts zerolog's JSON lines by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *logCounter) Write(p []byte) (int, error) {
	var line struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(p, &line) == nil {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[line.Message]++
		c.mu.Unlock()
	}
	return len(p), nil
}

func (c *logCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

// A ServicePort crash restarts its children too (protoactor stops them);
// the Portal's sockets are held for its successor and the Proxier re-sends
// the desired state, so clients see nothing and the proxy port is kept.
func TestServicePortCrashKeepsSocketsAndPort(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("spcrash", messages.Protocol_TCP, "127.0.26.1", 18080)
	p.Submit(snapshot(1, spe(sp, endpoints(addrs...))))
	before := w.listening(t, sp.GetKey().ID(), 1, 1)
	addr := "127.0.26.1:18080"

	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(60 * time.Second))
	hr := bufio.NewReader(held)
	if _, err := backends.ReadName(hr); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	h := startHammer([]string{addr}, 2, stop)
	for i := range 5 {
		okBefore := h.OK.Load()
		if err := p.Crash(sp.GetKey().ID(), roleServicePort, "test"); err != nil {
			t.Fatal(err)
		}
		// The restarted ServicePort reports, its restart counted on top
		// of the earlier ones, then clients keep completing connections.
		w.wait(t, fmt.Sprintf("service port restart %d", i+1), func(m map[string]*messages.ServicePortState) bool {
			st := m[sp.GetKey().ID()]
			return st.GetRestarts() == int32(i+1) && len(st.GetListenAddresses()) == 1
		})
		for deadline := time.Now().Add(10 * time.Second); h.OK.Load() < okBefore+10; {
			if time.Now().After(deadline) {
				t.Fatalf("restart %d: clients stalled", i+1)
			}
			time.Sleep(10 * time.Millisecond) // polling a counter the clients bump
		}
	}
	close(stop)
	h.WG.Wait()
	for _, errs := range h.Failures {
		t.Fatalf("%d failed connections across ServicePort crashes, first: %v", len(errs), errs[0])
	}
	after, err := p.State(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := after.GetServicePorts()[0]
	if !slices.Equal(got.GetListenAddresses(), before.GetListenAddresses()) || got.GetProxyPort() != 0 {
		t.Fatalf("listen addresses changed: %v -> %v (proxy port %d)", before.GetListenAddresses(), got.GetListenAddresses(), got.GetProxyPort())
	}
	io.WriteString(held, "still here\n")
	if line, err := hr.ReadString('\n'); err != nil || line != "still here\n" {
		t.Fatalf("connection established before the crashes broke: %q %v", line, err)
	}
	if n := p.Listeners.Len(); n != 1 {
		t.Fatalf("%d sockets open, want the service port's 1", n)
	}
}
