package watcher

import (
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// One comparison gives a change's upserts, deletes and pacing.
func TestDiffService(t *testing.T) {
	a := func(eps ...string) *messages.ServicePortEndpoints { return port("ns", "a", "http", eps...) }
	dns := func(eps ...string) *messages.ServicePortEndpoints { return port("ns", "a", "dns", eps...) }
	with := func(spe *messages.ServicePortEndpoints, f func(*messages.ServicePort)) *messages.ServicePortEndpoints {
		f(spe.ServicePort)
		return spe
	}
	type ports = []*messages.ServicePortEndpoints
	for _, tc := range []struct {
		name       string
		prev, next ports
		want       bool // paced
		ups, dels  int
	}{
		{"endpoint moved", ports{a("192.0.2.1")}, ports{a("192.0.2.2")}, false, 1, 0},
		{"endpoint added", ports{a("192.0.2.1")}, ports{a("192.0.2.1", "192.0.2.2")}, false, 1, 0},
		{"last endpoint gone", ports{a("192.0.2.1")}, ports{a()}, false, 1, 0},
		{"endpoints of two ports, order changed", ports{a("192.0.2.1"), dns("192.0.2.1")}, ports{dns("192.0.2.3"), a("192.0.2.2")}, false, 2, 0},
		{"nothing before nor after", nil, nil, false, 0, 0},
		{"unchanged", ports{a("192.0.2.1")}, ports{a("192.0.2.1")}, false, 0, 0},
		{"duplicate ID, the last kept, only endpoints differ", ports{a("192.0.2.1")}, ports{a("192.0.2.9"), a("192.0.2.2")}, false, 1, 0},
		{"new service", nil, ports{a("192.0.2.1")}, true, 1, 0},
		{"service gone", ports{a("192.0.2.1")}, nil, true, 0, 1},
		{"port added", ports{a("192.0.2.1")}, ports{a("192.0.2.1"), dns("192.0.2.1")}, true, 1, 0},
		{"port removed", ports{a("192.0.2.1"), dns("192.0.2.1")}, ports{a("192.0.2.1")}, true, 0, 1},
		{"port renamed", ports{a("192.0.2.1")}, ports{dns("192.0.2.1")}, true, 1, 1},
		{"cluster IP changed", ports{a("192.0.2.1")}, ports{with(a("192.0.2.1"), func(sp *messages.ServicePort) { sp.ClusterIps = &messages.IPSet{V4: []string{"198.18.0.1"}} })}, true, 1, 0},
		{"service port number changed", ports{a("192.0.2.1")}, ports{with(a("192.0.2.2"), func(sp *messages.ServicePort) { sp.Port = 81 })}, true, 1, 0},
		{"affinity changed with the endpoints", ports{a("192.0.2.1")}, ports{with(a("192.0.2.2"), func(sp *messages.ServicePort) {
			sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
		})}, true, 1, 0},
	} {
		d := diffService(tc.prev, tc.next)
		if d.paced != tc.want || len(d.upserts) != tc.ups || len(d.deletes) != tc.dels {
			t.Errorf("%s: paced %v, %d upserts, %d deletes; want %v, %d, %d", tc.name, d.paced, len(d.upserts), len(d.deletes), tc.want, tc.ups, tc.dels)
		}
	}
}

// FlushUnpaced hands on endpoint-only changes and holds the rest, with
// their latest state, for Flush; Flush then takes everything.
func TestTrackerFlushUnpacedHoldsWhatNeedsPacing(t *testing.T) {
	v := &fakeView{ports: map[string][]*messages.ServicePortEndpoints{
		"ns/a": {port("ns", "a", "http", "192.0.2.1")},
		"ns/b": {port("ns", "b", "http", "192.0.2.2")},
	}, errs: map[string]error{}}
	tr := NewTracker(v)
	tr.Mark("")
	if _, held := tr.FlushUnpaced(); !held || !tr.Holds("ns/a") {
		t.Fatal("a full resync must wait for Flush")
	}
	if ch := tr.Flush(); len(ch.Upserts) != 2 {
		t.Fatalf("first flush: %d upserts", len(ch.Upserts))
	}

	// a's endpoint moves, c is new, b's port gets a second one.
	v.ports["ns/a"] = []*messages.ServicePortEndpoints{port("ns", "a", "http", "192.0.2.3")}
	v.ports["ns/c"] = []*messages.ServicePortEndpoints{port("ns", "c", "http", "192.0.2.4")}
	v.ports["ns/b"] = []*messages.ServicePortEndpoints{port("ns", "b", "http", "192.0.2.2"), port("ns", "b", "dns", "192.0.2.2")}
	for _, s := range []string{"ns/a", "ns/b", "ns/c", "ns/none"} {
		tr.Mark(s)
	}
	ch, held := tr.FlushUnpaced()
	if len(ch.Upserts) != 1 || ch.Upserts[0].GetServicePort().GetKey().GetName() != "a" || len(ch.Deletes) != 0 {
		t.Fatalf("unpaced flush: %v upserts %v deletes, want a's only", ch.Upserts, ch.Deletes)
	}
	if !held || !tr.Holds("ns/b") || !tr.Holds("ns/c") || tr.Holds("ns/a") || tr.Holds("ns/none") {
		t.Fatalf("held %v: want b and c held, a and the unknown service not", held)
	}

	// Held services are not rebuilt by further unpaced flushes; a's next
	// change still goes at once.
	v.ports["ns/a"] = []*messages.ServicePortEndpoints{port("ns", "a", "http", "192.0.2.5")}
	v.ports["ns/c"] = []*messages.ServicePortEndpoints{port("ns", "c", "http", "192.0.2.6")}
	tr.Mark("ns/a")
	tr.Mark("ns/c")
	v.builds = 0
	if ch, _ := tr.FlushUnpaced(); len(ch.Upserts) != 1 || ch.Upserts[0].GetEndpoints()[0].GetIps()[0] != "192.0.2.5" || v.builds != 1 {
		t.Fatalf("second unpaced flush: %v, %d builds; want a's new endpoint, one build", ch.Upserts, v.builds)
	}

	// The paced flush takes the held services as they are now: b as the
	// unpaced flush built it, c (changed since) built again.
	ch = tr.Flush()
	if len(ch.Upserts) != 2 || tr.Pending() || tr.Holds("ns/c") {
		t.Fatalf("paced flush: %v (pending %v)", ch.Upserts, tr.Pending())
	}
	if v.builds != 2 {
		t.Fatalf("paced flush: %d builds in all since a's, want 2 (a's, then c's alone)", v.builds)
	}
	for _, spe := range ch.Upserts {
		if k := spe.GetServicePort().GetKey(); k.GetName() == "c" && spe.GetEndpoints()[0].GetIps()[0] != "192.0.2.6" {
			t.Fatalf("c flushed with %v, want its latest endpoint", spe.GetEndpoints())
		}
	}
}

// What did not change is handed on as the message last flushed, so the
// ServicePort actor tells what changed by identity alone.
func TestDiffServiceSharesWhatDidNotChange(t *testing.T) {
	prev := []*messages.ServicePortEndpoints{port("ns", "a", "http", "192.0.2.1")}
	type ports = []*messages.ServicePortEndpoints

	d := diffService(prev, ports{port("ns", "a", "http", "192.0.2.1")})
	if len(d.upserts) != 0 || d.next[0] != prev[0] {
		t.Fatalf("unchanged: %d upserts, next shared %v; want 0, true", len(d.upserts), d.next[0] == prev[0])
	}

	d = diffService(prev, ports{port("ns", "a", "http", "192.0.2.2")})
	up := d.upserts[0]
	if up.GetServicePort() != prev[0].GetServicePort() || SameEndpoints(up.GetEndpoints(), prev[0].GetEndpoints()) {
		t.Fatal("endpoints only: the upsert must carry the previous ServicePort and new Endpoints")
	}
	if d.next[0] != up {
		t.Fatal("the next flush must compare against what was sent")
	}

	moved := port("ns", "a", "http", "192.0.2.1")
	moved.ServicePort.Port = 81
	d = diffService(prev, ports{moved})
	up = d.upserts[0]
	if up.GetServicePort() == prev[0].GetServicePort() || !SameEndpoints(up.GetEndpoints(), prev[0].GetEndpoints()) {
		t.Fatal("service port only: the upsert must carry a new ServicePort and the previous Endpoints")
	}

	// A change skipped on the way still shows by identity against what
	// came before it.
	d2 := diffService(d.next, ports{func() *messages.ServicePortEndpoints {
		p := port("ns", "a", "http", "192.0.2.3")
		p.ServicePort.Port = 81
		return p
	}()})
	if up2 := d2.upserts[0]; up2.GetServicePort() == prev[0].GetServicePort() {
		t.Fatal("after a skipped service port change, the next upsert must still differ from the one before it")
	}
}
