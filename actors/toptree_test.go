package actors

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/backends"
)

// The top of the tree is supervised like the rest: the Watcher and the
// Proxier crash 20 times each under load on 20 service ports, and no
// connection fails; listening sockets, a held connection and an affinity
// pin carry over every Proxier restart.
func TestWatcherAndProxierCrashesLoseNothing(t *testing.T) {
	p := startProxyWith(t, Config{Stats: datapath.NewStatsTable()})
	w := watchState(t, p)
	addrs := tcpBackends(t, 3)
	spes := stickyFirst(20, "svc", "127.0.21.%d", 18080, addrs)
	var targets []string
	for i := range spes {
		targets = append(targets, fmt.Sprintf("127.0.21.%d:18080", i+1))
	}
	p.Submit(snapshot(1, spes...))
	listen := map[string]string{}
	for _, s := range spes {
		id := s.GetServicePort().GetKey().ID()
		listen[id] = w.listening(t, id, 1, 1).GetListenAddresses()[0]
	}
	pinned := dialName(t, targets[0])
	held, err := net.Dial("tcp", targets[1])
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldReader := bufio.NewReader(held)
	if _, err := backends.ReadName(heldReader); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	h := startHammer(targets, 4, stop)
	for i := range 40 {
		role := []string{roleProxier, roleWatcher}[i%2]
		if err := p.CrashTop(role, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // crashes spaced out; the load runs throughout
	}
	// Every service port serves again, on its address.
	w.wait(t, "all service ports listening on their addresses", func(m map[string]*messages.ServicePortState) bool {
		for id, addr := range listen {
			if st := m[id]; st == nil || len(st.GetListenAddresses()) != 1 || st.GetListenAddresses()[0] != addr {
				return false
			}
		}
		return true
	})
	for range 20 {
		roundTrip(targets[2]) // a little load after the last restart
	}
	close(stop)
	h.WG.Wait()
	failed, first := h.Failed()
	t.Logf("40 crashes (proxier, watcher): %d requests served, %d failed", h.OK.Load(), failed)
	if failed > 0 {
		t.Errorf("%d requests failed (first: %v)", failed, first)
	}
	for range 5 {
		if got := dialName(t, targets[0]); got != pinned {
			// As in TestCrashEachKindRepeatedly: a dial to the pinned
			// endpoint that timed out under load moves the pin, as it
			// should; nothing else may.
			if failed := p.cfg.Stats.For(spes[0].GetServicePort().GetKey().ID()).DialFailures.Load(); failed == 0 {
				t.Fatalf("the affinity pin moved from %s to %s", pinned, got)
			} else {
				t.Logf("the affinity pin moved from %s to %s after %d failed dials", pinned, got, failed)
			}
			pinned = got
		}
	}
	held.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Write([]byte("still\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := heldReader.ReadString('\n'); err != nil || line != "still\n" {
		t.Fatalf("the held connection broke: %q %v", line, err)
	}
}

// The Rules actor too: crashed 20 times, it keeps the desired rules and
// programs them again; service ports keep serving on their proxy ports.
func TestRulesCrashesKeepRules(t *testing.T) {
	fake := rules.NewFake()
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: fake, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	sp := svcPort("ruled", messages.Protocol_TCP, "198.18.0.70", 80)
	p.Submit(snapshot(1, spe(sp, endpoints(tcpBackends(t, 1)...))))
	st := w.listening(t, sp.GetKey().ID(), 1, 1)
	proxy := fmt.Sprintf("127.0.0.1:%d", st.GetProxyPort())
	stop := make(chan struct{})
	h := startHammer([]string{proxy}, 2, stop)
	for range 20 {
		if err := p.CrashTop(roleRules, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitRules(t, fake, func(s rules.Set) bool {
		for _, r := range s {
			if r.IP.String() == "198.18.0.70" && r.ProxyPort == int(st.GetProxyPort()) {
				return true
			}
		}
		return false
	})
	close(stop)
	h.WG.Wait()
	if failed, first := h.Failed(); failed > 0 || h.OK.Load() == 0 {
		t.Errorf("under 20 Rules crashes: %d served, %d failed (first: %v)", h.OK.Load(), failed, first)
	}
}

// A Proxier that crashes again while it starts its ServicePorts over keeps
// every listening socket and affinity pin: no socket is closed and opened
// again (which refuses and resets connections). A Portal spawned just
// before the second crash used to clear its ServicePort's hold when its
// Started ran late, then closed the sockets on its Stopping; and pins the
// Proxier sent a new ServicePort in a message were dropped with its
// mailbox.
func TestProxierCrashingWhileRestartingKeepsSockets(t *testing.T) {
	p := startProxyWith(t, Config{Stats: datapath.NewStatsTable()})
	w := watchState(t, p)
	restarts := make(chan struct{}, 64)
	sub := p.System.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && roleOf(e.Child.GetId()) == roleProxier {
			restarts <- struct{}{}
		}
	})
	t.Cleanup(func() { p.System.EventStream.Unsubscribe(sub) })
	addrs := tcpBackends(t, 3)
	spes := stickyFirst(20, "again", "127.0.22.%d", 18080, addrs)
	p.Submit(snapshot(1, spes...))
	type socket struct {
		addr string
		l    *datapath.Listener
	}
	// held is the socket servicePort's record holds on addr, or nil.
	held := func(servicePort, addr string) *datapath.Listener {
		ls, err := p.ServicePortListeners(servicePort)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Spec.Address == addr {
				return l
			}
		}
		return nil
	}
	sockets := map[string]socket{}
	for _, s := range spes {
		id := s.GetServicePort().GetKey().ID()
		st := w.listening(t, id, 1, 1)
		addr := st.GetListenAddresses()[0]
		l := held(id, addr)
		if l == nil {
			t.Fatalf("%s: no socket held on %s", id, addr)
		}
		sockets[id] = socket{addr, l}
	}
	pinned := dialName(t, "127.0.22.1:18080")
	awaitRestart := func(i int) {
		select {
		case <-restarts:
		case <-time.After(10 * time.Second):
			t.Fatalf("crash pair %d: the Proxier was not restarted", i)
		}
	}
	for i := range 10 {
		if err := p.CrashTop(roleProxier, "test"); err != nil {
			t.Fatal(err)
		}
		awaitRestart(i)
		// The second crash lands at a different point of the restart
		// each time: before, while or after the ServicePorts spawn
		// their Portals. A jitter, not a wait for anything.
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		if err := p.CrashTop(roleProxier, "test"); err != nil {
			t.Fatal(err)
		}
		awaitRestart(i)
		w.wait(t, "every service port listening again", func(m map[string]*messages.ServicePortState) bool {
			for id, s := range sockets {
				if st := m[id]; st == nil || len(st.GetListenAddresses()) != 1 || st.GetListenAddresses()[0] != s.addr {
					return false
				}
			}
			return true
		})
	}
	for id, s := range sockets {
		if err := roundTrip(s.addr); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		if got := held(id, s.addr); got != s.l {
			t.Errorf("%s: its socket on %s was closed and opened again", id, s.addr)
		}
	}
	// And the affinity pin stays (it moves only after a failed dial).
	if got := dialName(t, "127.0.22.1:18080"); got != pinned && p.cfg.Stats.For(spes[0].GetServicePort().GetKey().ID()).DialFailures.Load() == 0 {
		t.Errorf("the affinity pin moved from %s to %s", pinned, got)
	}
}
