package watcher

import (
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
	mu       sync.RWMutex
	services map[string]map[string]*messages.ServicePortEndpoints // service -> service port ID -> state
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{services: map[string]map[string]*messages.ServicePortEndpoints{}}
}

// Replace sets the whole desired state to ports and returns the services
// ("namespace/name") whose ports changed, sorted. Bad input must not drop
// or change what is serving, so some of the previous state is kept:
//   - a service in retain (its input failed this time) keeps each port it
//     had as it was; only ports it did not have are taken from ports;
//   - with retainMissing (some input failed before its service could be
//     identified) every previous port missing from ports is kept.
func (s *Store) Replace(ports []*messages.ServicePortEndpoints, retain []string, retainMissing bool) (changed []string) {
	next := map[string]map[string]*messages.ServicePortEndpoints{}
	for _, spe := range ports {
		k := spe.GetServicePort().GetKey()
		if next[k.Service()] == nil {
			next[k.Service()] = map[string]*messages.ServicePortEndpoints{}
		}
		next[k.Service()][k.ID()] = spe
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for svc, prev := range s.services {
		retained := slices.Contains(retain, svc)
		if !retained && !retainMissing {
			continue
		}
		for id, old := range prev {
			if _, present := next[svc][id]; present && !retained {
				continue
			}
			if next[svc] == nil {
				next[svc] = map[string]*messages.ServicePortEndpoints{}
			}
			next[svc][id] = old
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

func equalPorts(a, b map[string]*messages.ServicePortEndpoints) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		// The file source hands the same message again for a service
		// it did not rebuild: no need to compare it field by field.
		if y, ok := b[id]; !ok || (x != y && !proto.Equal(x, y)) {
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

// Apply changes the desired state by upserts and deletes (a Delta from a
// core) and returns the services whose ports changed, sorted.
func (s *Store) Apply(upserts []*messages.ServicePortEndpoints, deletes []*messages.ServicePortKey) (changed []string) {
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
		if _, ok := s.services[svc][k.ID()]; !ok {
			continue
		}
		delete(s.services[svc], k.ID())
		if len(s.services[svc]) == 0 {
			delete(s.services, svc)
		}
		mark(svc)
	}
	for _, spe := range upserts {
		k := spe.GetServicePort().GetKey()
		svc := k.Service()
		if old, ok := s.services[svc][k.ID()]; ok && proto.Equal(old, spe) {
			continue
		}
		if s.services[svc] == nil {
			s.services[svc] = map[string]*messages.ServicePortEndpoints{}
		}
		s.services[svc][k.ID()] = spe
		mark(svc)
	}
	slices.Sort(changed)
	return changed
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
