package watcher

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

func storePort(svc, port string, endpointIP string) *messages.ServicePortEndpoints {
	sp := &messages.ServicePort{Key: &messages.ServicePortKey{Namespace: "default", Name: svc, PortName: port, Protocol: messages.Protocol_TCP}, Port: 80}
	var eps []*messages.Endpoint
	if endpointIP != "" {
		eps = []*messages.Endpoint{{Ips: []string{endpointIP}, Port: 80, Ready: true}}
	}
	return &messages.ServicePortEndpoints{ServicePort: sp, Endpoints: eps}
}

// storeState is the store's ports as "id=endpoint" lines, by service.
func storeState(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for _, svc := range s.ServiceNames() {
		ports, err := s.Build(svc)
		if err != nil {
			t.Fatalf("Build(%s): %v", svc, err)
		}
		for _, spe := range ports {
			ep := ""
			if len(spe.GetEndpoints()) > 0 {
				ep = spe.GetEndpoints()[0].Address()
			}
			out = append(out, spe.GetServicePort().GetKey().ID()+"="+ep)
		}
	}
	slices.Sort(out)
	return out
}

func TestStoreReplaceReportsOnlyChangedServices(t *testing.T) {
	s := NewStore()
	if got := s.Replace([]*messages.ServicePortEndpoints{storePort("a", "http", "192.0.2.1"), storePort("b", "http", "192.0.2.2")}, nil, false); !slices.Equal(got, []string{"default/a", "default/b"}) {
		t.Fatalf("first Replace changed %v", got)
	}
	// An identical state changes nothing.
	if got := s.Replace([]*messages.ServicePortEndpoints{storePort("b", "http", "192.0.2.2"), storePort("a", "http", "192.0.2.1")}, nil, false); len(got) != 0 {
		t.Fatalf("identical Replace changed %v", got)
	}
	// One endpoint of a changes, b goes, c comes.
	got := s.Replace([]*messages.ServicePortEndpoints{storePort("a", "http", "192.0.2.9"), storePort("c", "dns", "")}, nil, false)
	if want := []string{"default/a", "default/b", "default/c"}; !slices.Equal(got, want) {
		t.Fatalf("Replace changed %v, want %v", got, want)
	}
	if got, want := storeState(t, s), []string{"default/a:http/TCP=192.0.2.9:80", "default/c:dns/TCP="}; !slices.Equal(got, want) {
		t.Fatalf("state = %v, want %v", got, want)
	}
	if ports, err := s.Build("default/b"); err != nil || len(ports) != 0 {
		t.Fatalf("Build of a removed service = %v, %v; want nothing", ports, err)
	}
}

// Bad input keeps what serves: a retained service keeps its previous ports
// (new ports of it are still added); retainMissing keeps every port the
// new state lacks.
func TestStoreReplaceRetains(t *testing.T) {
	s := NewStore()
	s.Replace([]*messages.ServicePortEndpoints{storePort("a", "http", "192.0.2.1"), storePort("a", "https", "192.0.2.1"), storePort("b", "http", "192.0.2.2")}, nil, false)

	got := s.Replace([]*messages.ServicePortEndpoints{storePort("a", "http", ""), storePort("a", "admin", "192.0.2.3"), storePort("b", "http", "192.0.2.2")}, []string{"default/a"}, false)
	if want := []string{"default/a"}; !slices.Equal(got, want) {
		t.Fatalf("Replace changed %v, want %v", got, want)
	}
	want := []string{"default/a:admin/TCP=192.0.2.3:80", "default/a:http/TCP=192.0.2.1:80", "default/a:https/TCP=192.0.2.1:80", "default/b:http/TCP=192.0.2.2:80"}
	if got := storeState(t, s); !slices.Equal(got, want) {
		t.Fatalf("after a retained failure: %v, want %v", got, want)
	}

	// A failure nobody can attribute: nothing missing goes, changes still apply.
	got = s.Replace([]*messages.ServicePortEndpoints{storePort("b", "http", "192.0.2.7")}, nil, true)
	if want := []string{"default/b"}; !slices.Equal(got, want) {
		t.Fatalf("Replace changed %v, want %v", got, want)
	}
	want = []string{"default/a:admin/TCP=192.0.2.3:80", "default/a:http/TCP=192.0.2.1:80", "default/a:https/TCP=192.0.2.1:80", "default/b:http/TCP=192.0.2.7:80"}
	if got := storeState(t, s); !slices.Equal(got, want) {
		t.Fatalf("after an unattributed failure: %v, want %v", got, want)
	}

	// Once the input is good again, what it lacks goes.
	if got := s.Replace([]*messages.ServicePortEndpoints{storePort("b", "http", "192.0.2.7")}, nil, false); !slices.Equal(got, []string{"default/a"}) {
		t.Fatalf("Replace changed %v, want [default/a]", got)
	}
}

// TestStoreTriggerTimes: a Delta's trigger times are held by service, from
// its map (whole upserts) and from each endpoint update's own; a service
// the Delta deletes or does not hold keeps none, and a snapshot keeps the
// times of the services it keeps.
func TestStoreTriggerTimes(t *testing.T) {
	s := NewStore()
	web, api := storePort("web", "http", "192.0.2.1"), storePort("api", "http", "192.0.2.2")
	if _, err := s.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{web, api},
		TriggerUnixNano: map[string]int64{"default/web": 100, "default/gone": 50}}); err != nil {
		t.Fatal(err)
	}
	if got := s.TriggerTime("default/web").UnixNano(); got != 100 {
		t.Fatalf("web's trigger from the map: %d, want 100", got)
	}
	if !s.TriggerTime("default/api").IsZero() || !s.TriggerTime("default/gone").IsZero() {
		t.Fatal("a trigger time for a service the map does not name, or not held")
	}
	changed, err := s.Apply(&messages.Delta{EndpointUpdates: []*messages.EndpointsUpdate{
		{Key: web.GetServicePort().GetKey(), Endpoints: api.GetEndpoints(), TriggerUnixNano: 200},
		{Key: api.GetServicePort().GetKey(), Endpoints: web.GetEndpoints(), TriggerUnixNano: 300}}})
	if err != nil || !slices.Equal(changed, []string{"default/api", "default/web"}) {
		t.Fatalf("updates changed %v (%v)", changed, err)
	}
	if w, a := s.TriggerTime("default/web").UnixNano(), s.TriggerTime("default/api").UnixNano(); w != 200 || a != 300 {
		t.Fatalf("triggers from the updates: web %d, api %d; want 200, 300", w, a)
	}
	// An update without one keeps the time held.
	if _, err := s.Apply(&messages.Delta{EndpointUpdates: []*messages.EndpointsUpdate{{Key: web.GetServicePort().GetKey()}}}); err != nil {
		t.Fatal(err)
	}
	if got := s.TriggerTime("default/web").UnixNano(); got != 200 {
		t.Fatalf("web's trigger after an update without one: %d, want 200", got)
	}
	s.Replace([]*messages.ServicePortEndpoints{web}, nil, false)
	if got := s.TriggerTime("default/web").UnixNano(); got != 200 || !s.TriggerTime("default/api").IsZero() {
		t.Fatalf("after a snapshot: web %d (want 200), api %v (want none)", got, s.TriggerTime("default/api"))
	}
	if _, err := s.Apply(&messages.Delta{Deletes: []*messages.ServicePortKey{web.GetServicePort().GetKey()}}); err != nil {
		t.Fatal(err)
	}
	if !s.TriggerTime("default/web").IsZero() {
		t.Fatal("a deleted service kept its trigger time")
	}
}

// BenchmarkStoreApply is a backend's work for a core's Delta of 20
// endpoint updates across 10,000 service ports: decoding it and applying
// it to its Store.
func BenchmarkStoreApply(b *testing.B) {
	s := NewStore()
	var ports []*messages.ServicePortEndpoints
	for i := range 10000 {
		ports = append(ports, storePort(fmt.Sprintf("svc-%d", i), "http", "192.0.2.1"))
	}
	s.Replace(ports, nil, false)
	var raws [][]byte
	for v := range 50 {
		d := &messages.Delta{Session: "session", Seq: uint64(v)}
		for j := range 20 {
			p := ports[(v*20+j)*97%len(ports)]
			d.EndpointUpdates = append(d.EndpointUpdates, &messages.EndpointsUpdate{Key: p.GetServicePort().GetKey(),
				Endpoints: []*messages.Endpoint{{Ips: []string{fmt.Sprintf("198.18.%d.%d", v, j)}, Port: 8080, Ready: true, Serving: true,
					NodeName: fmt.Sprintf("node-%d", j), Zone: "zone-1", Cluster: true}}, TriggerUnixNano: int64(v)})
		}
		raw, err := proto.Marshal(d)
		if err != nil {
			b.Fatal(err)
		}
		raws = append(raws, raw)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var d messages.Delta
		if err := proto.Unmarshal(raws[i%len(raws)], &d); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Apply(&d); err != nil {
			b.Fatal(err)
		}
	}
}
