package watcher

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
	services map[string]storedService
	// name is Apply's scratch for a service's name, to look it up without
	// building a string per change (under mu).
	name []byte
}

// storedService is one service as the Store holds it.
type storedService struct {
	// name is the map's key, so that Apply reports the service without
	// building its name again.
	name  string
	ports portList
	// trigger is the last-change trigger time (Unix nanoseconds) of the
	// service's endpoints as a core sent it, 0 when unknown.
	trigger int64
}

// portList is one service's ports, one per key.
type portList []*messages.ServicePortEndpoints

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{services: map[string]storedService{}}
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
		for _, old := range prev.ports {
			if next[svc].index(old.GetServicePort().GetKey()) >= 0 && !retained {
				continue
			}
			next[svc] = next[svc].put(old)
		}
	}
	services := make(map[string]storedService, len(next))
	for svc, ports := range next {
		prev := s.services[svc]
		if !equalPorts(prev.ports, ports) {
			changed = append(changed, svc)
		}
		// A held service keeps its trigger time: no source replacing
		// whole sends one.
		services[svc] = storedService{name: svc, ports: ports, trigger: prev.trigger}
	}
	for svc := range s.services {
		if _, ok := next[svc]; !ok {
			changed = append(changed, svc)
		}
	}
	s.services = services
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
	ports := make([]*messages.ServicePortEndpoints, 0, len(s.services[service].ports))
	for _, spe := range s.services[service].ports {
		ports = append(ports, spe)
	}
	return ports, nil
}

// Apply changes the desired state by a core's Delta: deletes, upserts,
// then updates (endpoints only, each port keeping the definition held)
// and returns the services they touched, sorted; then it keeps the
// trigger times the Delta carries. An upsert counts as a change without
// comparing it with the port held: a core sends only what changed, and
// the Watcher's one comparison (the Tracker's diff) drops what did not.
// An update of a port not held is an error: the core and this Store are
// out of step, and only a snapshot (Replace) mends it.
func (s *Store) Apply(d *messages.Delta) (changed []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range d.GetDeletes() {
		svc, ok := s.lookup(k)
		if !ok {
			continue
		}
		i := svc.ports.index(k)
		if i < 0 {
			continue
		}
		changed = append(changed, svc.name)
		if svc.ports = slices.Delete(svc.ports, i, i+1); len(svc.ports) > 0 {
			s.services[svc.name] = svc
		} else {
			delete(s.services, svc.name)
		}
	}
	for _, spe := range d.GetUpserts() {
		k := spe.GetServicePort().GetKey()
		svc, ok := s.lookup(k)
		if !ok {
			svc.name = k.Service()
		}
		svc.ports = svc.ports.put(spe)
		s.services[svc.name] = svc
		changed = append(changed, svc.name)
	}
	for _, u := range d.GetEndpointUpdates() {
		svc, _ := s.lookup(u.GetKey())
		i := svc.ports.index(u.GetKey())
		if i < 0 {
			return nil, fmt.Errorf("endpoints of %s, a service port not held", u.GetKey().ID())
		}
		// A new message: the Watcher's Tracker holds the last one.
		svc.ports[i] = &messages.ServicePortEndpoints{ServicePort: svc.ports[i].GetServicePort(), Endpoints: u.GetEndpoints()}
		if t := u.GetTriggerUnixNano(); t != 0 {
			svc.trigger = t
			s.services[svc.name] = svc
		}
		changed = append(changed, svc.name)
	}
	for name, t := range d.GetTriggerUnixNano() {
		if svc, ok := s.services[name]; ok {
			svc.trigger = t
			s.services[name] = svc
		}
	}
	slices.Sort(changed)
	return slices.Compact(changed), nil
}

// lookup is the service holding k's port, without building its name.
func (s *Store) lookup(k *messages.ServicePortKey) (storedService, bool) {
	s.name = append(append(append(s.name[:0], k.GetNamespace()...), '/'), k.GetName()...)
	svc, ok := s.services[string(s.name)]
	return svc, ok
}

// TriggerTime is the service's last-change trigger time as a core last
// sent it (zero when unknown): the Watcher observes
// kubeproxy_network_programming_duration_seconds from it, as with
// informers.
func (s *Store) TriggerTime(service string) time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if t := s.services[service].trigger; t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

// All is every service port held, sorted by ID.
func (s *Store) All() []*messages.ServicePortEndpoints {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*messages.ServicePortEndpoints
	for _, svc := range s.services {
		for _, spe := range svc.ports {
			out = append(out, spe)
		}
	}
	slices.SortFunc(out, func(a, b *messages.ServicePortEndpoints) int {
		return strings.Compare(a.GetServicePort().GetKey().ID(), b.GetServicePort().GetKey().ID())
	})
	return out
}
