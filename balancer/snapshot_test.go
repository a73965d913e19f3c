package balancer

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

func snapshotEndpoints(addrs ...string) []*messages.Endpoint {
	var eps []*messages.Endpoint
	for _, a := range addrs {
		eps = append(eps, &messages.Endpoint{Ips: []string{a}, Port: 80, Ready: true, Internal: true, External: true})
	}
	return eps
}

// A Snapshot picks as the actor's own pick does: round-robin over the
// pool, ejected endpoints and the exclusions passed over, the outcome
// asked for of endpoints with a record; the positions carry over from one
// Snapshot to the next.
func TestSnapshotPicksAsTheActor(t *testing.T) {
	s := NewScopes(rand.New(rand.NewPCG(1, 2)))
	s.Update(snapshotEndpoints("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"), false)
	o := NewOutliers(OutlierConfig{ConsecutiveFailures: 1, BaseEjection: time.Second, MaxEjection: time.Minute})
	var pos Positions
	snap := s.Snapshot(o, &pos)
	seen := map[string]int{}
	for range 8 {
		ep, report, ok := snap.Pick(false, "192.0.2.1", nil)
		if !ok || report {
			t.Fatalf("pick = %q, report %v, ok %v", ep, report, ok)
		}
		seen[ep]++
	}
	if len(seen) != 4 {
		t.Fatalf("8 picks over 4 endpoints: %v, want each twice", seen)
	}
	for ep, n := range seen {
		if n != 2 {
			t.Fatalf("8 picks over 4 endpoints: %v (%s %d times), want each twice", seen, ep, n)
		}
	}

	o.Failed("10.0.0.1:80", time.Now()) // ejected
	snap2 := s.Snapshot(o, &pos)
	for range 8 {
		ep, report, ok := snap2.Pick(false, "192.0.2.1", []string{"10.0.0.2:80"})
		if !ok || ep == "10.0.0.1:80" || ep == "10.0.0.2:80" || report {
			t.Fatalf("pick = %q, report %v, ok %v: want neither the ejected nor the excluded endpoint", ep, report, ok)
		}
	}
	if !snap2.Watching {
		t.Fatal("an endpoint has a record: Watching should be set")
	}
	if _, _, ok := snap2.Pick(false, "192.0.2.1", []string{"10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"}); ok {
		t.Fatal("every endpoint ejected or excluded: want none")
	}
	// The old Snapshot is unchanged; positions are shared.
	if ep, _, _ := snap.Pick(false, "192.0.2.1", nil); ep == "" {
		t.Fatal("the first Snapshot should still pick")
	}

	// Panic threshold: with 3 of 4 ejected, ejections are ignored.
	o.Failed("10.0.0.2:80", time.Now())
	o.Failed("10.0.0.3:80", time.Now())
	snap3 := s.Snapshot(o, &pos)
	seen = map[string]int{}
	for range 8 {
		ep, report, _ := snap3.Pick(false, "192.0.2.1", nil)
		seen[ep]++
		if ep != "10.0.0.4:80" && !report {
			t.Fatalf("%s has a record: want its outcome reported", ep)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("panic threshold crossed: picks %v, want all 4", seen)
	}

	// No endpoints of the client's family.
	if _, _, ok := snap3.Pick(false, "2001:db8::1", nil); ok {
		t.Fatal("an IPv6 client has no IPv6 endpoint: want none")
	}
}

// Connections pick from a Snapshot while the actor publishes new ones.
func TestSnapshotConcurrentPicks(t *testing.T) {
	s := NewScopes(nil)
	s.Update(snapshotEndpoints("10.0.0.1", "10.0.0.2"), false)
	var h SnapshotHolder
	h.Store(s.Snapshot(NewOutliers(DefaultOutlierConfig), &h.Positions))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				if _, _, ok := h.Load().Pick(false, "192.0.2.1", nil); !ok {
					t.Error("no pick")
					return
				}
			}
		}()
	}
	for i := range 200 {
		s.Update(snapshotEndpoints("10.0.0.1", "10.0.0.2", "10.0.0."+string(rune('3'+i%5))), false)
		h.Store(s.Snapshot(NewOutliers(DefaultOutlierConfig), &h.Positions))
	}
	wg.Wait()
}

// A Snapshot older than the last endpoint set sent to the Balancer is not
// served: a connection asks the actor until the Balancer publishes one
// built from that set.
func TestSnapshotHolderServesOnlyTheExpectedVersion(t *testing.T) {
	s := NewScopes(nil)
	s.Update(snapshotEndpoints("10.0.0.1"), false)
	var h SnapshotHolder
	h.Store(s.Snapshot(NewOutliers(DefaultOutlierConfig), &h.Positions))
	if h.Load() == nil {
		t.Fatal("version 0, nothing expected: the Snapshot is current")
	}
	v := h.Expect()
	if h.Load() != nil {
		t.Fatal("a set is on its way: the Snapshot before it was served")
	}
	snap := s.Snapshot(NewOutliers(DefaultOutlierConfig), &h.Positions)
	snap.Version = v
	h.Store(snap)
	if h.Load() != snap {
		t.Fatal("the Snapshot of the expected set was not served")
	}
}
