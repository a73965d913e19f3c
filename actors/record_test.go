package actors

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// A connection never picks from endpoints older than what its service port
// last reported, also when its Balancer or its ServicePort crashes around
// the change: the set is the record's, and a Balancer applies the record's
// latest before it picks (record.setEndpoints, Balancer.current).
func TestPicksNeverOlderThanTheReport(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("fresh", messages.Protocol_TCP, "127.0.23.1", 18080)
	id := sp.GetKey().ID()
	var gen int64
	for i := 1; i <= 24; i++ {
		want := i % 2
		p.Submit(snapshot(int64(i), spe(sp, endpoints(addrs[want]))))
		if i > 1 {
			role := []string{roleBalancer, roleServicePort, rolePortal}[i%3]
			if err := p.Crash(id, role, "test"); err != nil && !errors.Is(err, ErrUnknownServicePort) {
				t.Fatal(err)
			}
		}
		w.wait(t, fmt.Sprintf("change %d reported", i), func(m map[string]*messages.ServicePortState) bool {
			st := m[id]
			eps := st.GetEndpoints()
			if st.GetGeneration() <= gen || len(eps) != 1 || eps[0].Address() != addrs[want] || len(st.GetListenAddresses()) != 1 {
				return false
			}
			gen = st.GetGeneration()
			return true
		})
		for range 5 {
			if got := dialName(t, "127.0.23.1:18080"); got != fmt.Sprintf("backend-%d", want) {
				t.Fatalf("change %d: reached %s after the service port reported only backend-%d", i, got, want)
			}
		}
	}
}

// A service port deleted and added again while its old ServicePort may
// still be stopping gets a new record under a
// new name: the old ServicePort, releasing its record as it stops, closes
// none of the new one's sockets.
func TestDeletedAndAddedAgainKeepsTheNewSockets(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("again", messages.Protocol_TCP, "127.0.23.2", 18080)
	id := sp.GetKey().ID()
	p.Submit(snapshot(1, spe(sp, endpoints(addrs[0]))))
	old := w.listening(t, id, 1, 1)

	p.Submit(snapshot(2))
	w.wait(t, "deleted", func(m map[string]*messages.ServicePortState) bool { return m[id].GetDeleted() })
	p.Submit(snapshot(3, spe(sp, endpoints(addrs[1]))))
	w.wait(t, "added again", func(m map[string]*messages.ServicePortState) bool {
		st := m[id]
		return st.GetActorId() != old.GetActorId() && len(st.GetListenAddresses()) == 1 && len(st.GetEndpoints()) == 1 && st.GetEndpoints()[0].Address() == addrs[1]
	})
	// The old ServicePort has released its record once it is gone.
	if err := p.System.Root.StopFuture(actor.NewPID(p.System.Address(), old.GetActorId())).Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if got := dialName(t, "127.0.23.2:18080"); got != "backend-1" {
			t.Fatalf("dial %d: reached %s, want backend-1", i, got)
		}
	}
	if n := p.Listeners.Len(); n != 1 {
		t.Fatalf("%d sockets open, want the new service port's 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := p.State(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GetServicePorts()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state has %d service ports, want 1", len(st.GetServicePorts()))
		}
	}
}
