package watcher

import (
	"errors"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// fakeView is a map of service -> ports (pure logic: a fake is fine here).
type fakeView struct {
	ports  map[string][]*messages.ServicePortEndpoints
	errs   map[string]error
	builds int
}

func (v *fakeView) ServiceNames() []string {
	var out []string
	for k := range v.ports {
		out = append(out, k)
	}
	return out
}

func (v *fakeView) Build(svc string) ([]*messages.ServicePortEndpoints, error) {
	v.builds++
	if err := v.errs[svc]; err != nil {
		return nil, err
	}
	return v.ports[svc], nil
}

func port(ns, name, portName string, eps ...string) *messages.ServicePortEndpoints {
	spe := &messages.ServicePortEndpoints{ServicePort: &messages.ServicePort{
		Key: &messages.ServicePortKey{Namespace: ns, Name: name, PortName: portName, Protocol: messages.Protocol_TCP}, Port: 80}}
	for _, ip := range eps {
		spe.Endpoints = append(spe.Endpoints, &messages.Endpoint{Ips: []string{ip}, Port: 8080})
	}
	return spe
}

func TestTrackerCoalescesAndSendsOnlyChanges(t *testing.T) {
	v := &fakeView{ports: map[string][]*messages.ServicePortEndpoints{
		"ns/a": {port("ns", "a", "http", "192.0.2.1"), port("ns", "a", "dns", "192.0.2.1")},
		"ns/b": {port("ns", "b", "http", "192.0.2.2")},
	}, errs: map[string]error{}}
	tr := NewTracker(v)
	tr.Mark("")
	if ch := tr.Flush(); len(ch.Upserts) != 3 || len(ch.Deletes) != 0 {
		t.Fatalf("first flush: %d upserts %d deletes", len(ch.Upserts), len(ch.Deletes))
	}

	// A burst of 100 events for one service whose http port changed: one
	// rebuild, one change (the unchanged dns port is not sent).
	v.ports["ns/a"] = []*messages.ServicePortEndpoints{port("ns", "a", "http", "192.0.2.1", "192.0.2.3"), port("ns", "a", "dns", "192.0.2.1")}
	v.builds = 0
	for range 100 {
		tr.Mark("ns/a")
	}
	ch := tr.Flush()
	if v.builds != 1 || len(ch.Upserts) != 1 || ch.Upserts[0].GetServicePort().GetKey().GetPortName() != "http" {
		t.Fatalf("burst: %d builds, upserts %v", v.builds, ch.Upserts)
	}
	// Events without a real change send nothing.
	tr.Mark("ns/b")
	if ch := tr.Flush(); len(ch.Upserts)+len(ch.Deletes) != 0 {
		t.Fatalf("no-op event produced %v", ch)
	}
	// A removed port and a removed service are deleted.
	v.ports["ns/a"] = v.ports["ns/a"][:1]
	delete(v.ports, "ns/b")
	tr.Mark("ns/a")
	tr.Mark("ns/b")
	ch = tr.Flush()
	if len(ch.Deletes) != 2 || ch.Deletes[0].ID() != "ns/a:dns/TCP" || ch.Deletes[1].ID() != "ns/b:http/TCP" {
		t.Fatalf("deletes: %v", ch.Deletes)
	}
	// A service that fails validation keeps its previous state.
	v.errs["ns/a"] = errors.New("spec.ports[0].port: bad")
	tr.Mark("ns/a")
	if ch := tr.Flush(); len(ch.Errors) != 1 || len(ch.Deletes) != 0 || len(tr.State()) != 1 {
		t.Fatalf("bad service: %+v, state %d", ch, len(tr.State()))
	}
	if tr.Events != 1+100+1+2+1 || tr.Changes != 3+1+2 {
		t.Fatalf("counts: %d events, %d changes", tr.Events, tr.Changes)
	}
}

func TestTopologyHints(t *testing.T) {
	hinted := func(ip string, zones ...string) *messages.Endpoint {
		return &messages.Endpoint{Ips: []string{ip}, Port: 80, Ready: true, Serving: true, ZoneHints: zones}
	}
	names := func(eps []*messages.Endpoint, internal bool) []string {
		var out []string
		for _, e := range eps {
			if (internal && e.Internal) || (!internal && e.External) {
				out = append(out, e.Ips[0])
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		eps  []*messages.Endpoint
		zone string
		want int
	}{
		{"all hinted, one for zone", []*messages.Endpoint{hinted("192.0.2.1", "a"), hinted("192.0.2.2", "b"), hinted("192.0.2.3", "a")}, "a", 2},
		{"one endpoint lacks hints", []*messages.Endpoint{hinted("192.0.2.1", "a"), hinted("192.0.2.2")}, "a", 2},
		{"no endpoint for zone", []*messages.Endpoint{hinted("192.0.2.1", "b"), hinted("192.0.2.2", "b")}, "a", 2},
		{"node has no zone", []*messages.Endpoint{hinted("192.0.2.1", "a"), hinted("192.0.2.2", "b")}, "", 2},
	} {
		got := names(selectEndpoints(tc.eps, scopePolicy{}, "node-a", tc.zone, topologyLog{}), true)
		if len(got) != tc.want {
			t.Errorf("%s: internal endpoints %v, want %d", tc.name, got, tc.want)
		}
	}
}

// timedView is a fakeView that knows its services' trigger times.
type timedView struct {
	*fakeView
	at map[string]time.Time
}

func (v timedView) TriggerTime(svc string) time.Time { return v.at[svc] }

// A flush hands on the trigger times of the services it changed, and
// only theirs: the Watcher observes latency from the changes alone.
func TestTrackerChangesCarryTriggerTimes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	v := timedView{&fakeView{ports: map[string][]*messages.ServicePortEndpoints{
		"ns/a": {port("ns", "a", "http", "192.0.2.1")},
		"ns/b": {port("ns", "b", "http", "192.0.2.2")},
	}, errs: map[string]error{}}, map[string]time.Time{"ns/a": t0, "ns/b": t0.Add(time.Second)}}
	tr := NewTracker(v)
	tr.Mark("")
	if ch := tr.Flush(); len(ch.Triggers) != 2 || !ch.Triggers["ns/b"].Equal(t0.Add(time.Second)) {
		t.Fatalf("first flush: triggers %v", ch.Triggers)
	}
	tr.Mark("ns/a") // nothing changed
	v.ports["ns/b"] = nil
	v.at["ns/b"] = t0.Add(2 * time.Second)
	tr.Mark("ns/b") // deleted
	ch := tr.Flush()
	if _, ok := ch.Triggers["ns/a"]; ok || !ch.Triggers["ns/b"].Equal(t0.Add(2*time.Second)) || len(ch.Deletes) != 1 {
		t.Fatalf("second flush: triggers %v, deletes %v; want b's alone", ch.Triggers, ch.Deletes)
	}
}
