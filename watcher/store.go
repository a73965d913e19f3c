package watcher

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// Store is a View over a desired state that its source replaces whole: the
// file source on every reload, tests and benchmarks. Replace reports which
// services changed, so the source can notify the Watcher like informers
// do, and the Tracker rebuilds only those: one change engine whatever the
// source. It is safe for concurrent use (a source writes, the Watcher reads).
type Store struct {
	mu sync.RWMutex
	// services holds each service's ports. A slice, not a map by service
	// port ID: a service has a few ports, and a slice is smaller per
	// service port.
	services map[string]portList
}

// portList is one service's ports, one per key.
type portList []*messages.ServicePortEndpoints

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{services: map[string]portList{}}
}

// index is where the port of key k is, or -1. Keys of one service differ
// by port name and protocol only, but all four are compared.
func (l portList) index(k *messages.ServicePortKey) int {
	for i, spe := range l {
		o := spe.GetServicePort().GetKey()
		if o.GetPortName() == k.GetPortName() && o.GetProtocol() == k.GetProtocol() &&
			o.GetName() == k.GetName() && o.GetNamespace() == k.GetNamespace() {
			return i
		}
	}
	return -1
}

// put sets spe as the port of its key, replacing one held.
func (l portList) put(spe *messages.ServicePortEndpoints) portList {
	if i := l.index(spe.GetServicePort().GetKey()); i >= 0 {
		l[i] = spe
		return l
	}
	return append(l, spe)
}

// Replace sets the whole desired state to ports and returns the services
// ("namespace/name") whose ports changed, sorted. Bad input must not drop
// or change what is serving, so some of the previous state is kept:
//   - a service in retain (its input failed this time) keeps each port it
//     had as it was; only ports it did not have are taken from ports;
//   - with retainMissing (some input failed before its service could be
//     identified) every previous port missing from ports is kept.
func (s *Store) Replace(ports []*messages.ServicePortEndpoints, retain []string, retainMissing bool) (changed []string) {
	next := map[string]portList{}
	for _, spe := range ports {
		svc := spe.GetServicePort().GetKey().Service()
		next[svc] = next[svc].put(spe)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for svc, prev := range s.services {
		retained := slices.Contains(retain, svc)
		if !retained && !retainMissing {
			continue
		}
		for _, old := range prev {
			if next[svc].index(old.GetServicePort().GetKey()) >= 0 && !retained {
				continue
			}
			next[svc] = next[svc].put(old)
		}
	}
	for svc, ports := range next {
		if !equalPorts(s.services[svc], ports) {
			changed = append(changed, svc)
		}
	}
	for svc := range s.services {
		if _, ok := next[svc]; !ok {
			changed = append(changed, svc)
		}
	}
	s.services = next
	slices.Sort(changed)
	return changed
}

func equalPorts(a, b portList) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		// The file source hands the same message again for a service
		// it did not rebuild: no need to compare it field by field.
		i := b.index(x.GetServicePort().GetKey())
		if i < 0 || (x != b[i] && !proto.Equal(x, b[i])) {
			return false
		}
	}
	return true
}

// ServiceNames implements View.
func (s *Store) ServiceNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.services))
	for svc := range s.services {
		names = append(names, svc)
	}
	slices.Sort(names)
	return names
}

// Build implements View: the service's ports, none when it is unknown.
func (s *Store) Build(service string) ([]*messages.ServicePortEndpoints, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ports := make([]*messages.ServicePortEndpoints, 0, len(s.services[service]))
	for _, spe := range s.services[service] {
		ports = append(ports, spe)
	}
	return ports, nil
}

// Apply changes the desired state by a core's Delta: deletes, upserts,
// then updates (endpoints only, each port keeping the definition held)
// and returns the services they touched, sorted. An upsert counts as a
// change without comparing it with the port held: a core sends only what
// changed, and the Watcher's one comparison (the Tracker's diff) drops
// what did not. An update of a port not held is an error: the core and
// this Store are out of step, and only a snapshot (Replace) mends it.
func (s *Store) Apply(upserts []*messages.ServicePortEndpoints, deletes []*messages.ServicePortKey,
	updates []*messages.EndpointsUpdate) (changed []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	mark := func(svc string) {
		if !seen[svc] {
			seen[svc] = true
			changed = append(changed, svc)
		}
	}
	for _, k := range deletes {
		svc := k.Service()
		i := s.services[svc].index(k)
		if i < 0 {
			continue
		}
		if rest := slices.Delete(s.services[svc], i, i+1); len(rest) > 0 {
			s.services[svc] = rest
		} else {
			delete(s.services, svc)
		}
		mark(svc)
	}
	for _, spe := range upserts {
		k := spe.GetServicePort().GetKey()
		svc := k.Service()
		s.services[svc] = s.services[svc].put(spe)
		mark(svc)
	}
	for _, u := range updates {
		svc := u.GetKey().Service()
		ports := s.services[svc]
		i := ports.index(u.GetKey())
		if i < 0 {
			return nil, fmt.Errorf("endpoints of %s, a service port not held", u.GetKey().ID())
		}
		// A new message: the Watcher's Tracker holds the last one.
		ports[i] = &messages.ServicePortEndpoints{ServicePort: ports[i].GetServicePort(), Endpoints: u.GetEndpoints()}
		mark(svc)
	}
	slices.Sort(changed)
	return changed, nil
}

// All is every service port held, sorted by ID.
func (s *Store) All() []*messages.ServicePortEndpoints {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*messages.ServicePortEndpoints
	for _, ports := range s.services {
		for _, spe := range ports {
			out = append(out, spe)
		}
	}
	slices.SortFunc(out, func(a, b *messages.ServicePortEndpoints) int {
		return strings.Compare(a.GetServicePort().GetKey().ID(), b.GetServicePort().GetKey().ID())
	})
	return out
}
