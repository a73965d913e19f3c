package watcher

import (
	"slices"
	"testing"

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
