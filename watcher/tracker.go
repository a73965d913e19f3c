package watcher

import (
	"slices"
	"strings"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// View builds the node-local view of one service ("namespace/name"); the
// Kubernetes source is one.
type View interface {
	ServiceNames() []string
	Build(service string) ([]*messages.ServicePortEndpoints, error)
}

// TriggerTimer is a View that knows when a service's endpoints last
// changed at the source (EndpointSlices' last-change-trigger-time; zero
// when unknown). The Tracker hands those times on with the changes.
type TriggerTimer interface {
	TriggerTime(service string) time.Time
}

// Applier is a View that changes only by the events its consumer applies
// to it (Objects): Apply returns the services whose view changed ("" for
// every service).
type Applier interface {
	Apply(Event) []string
}

// Tracker turns change notifications into per-service-port changes: events
// mark services dirty, and Flush rebuilds only those and returns only what
// really changed against the last flush. A burst of events for one service
// between two flushes costs one rebuild and at most one change per port.
type Tracker struct {
	view  View
	dirty map[string]bool
	all   bool
	// held are the dirty services whose change needs the paced Flush
	// (serviceDiff.paced): FlushUnpaced leaves them to it. built keeps the
	// build and diff that held one until it is marked again, so Flush
	// neither builds nor compares it a second time.
	held  map[string]bool
	built map[string]build
	// last holds the service ports sent, by service. A slice, not a map
	// by service port ID: a service has a few ports, and a slice is
	// smaller per service port.
	last map[string][]*messages.ServicePortEndpoints

	// Events counts notifications, Changes the upserts and deletes flushed.
	Events, Changes int64
}

// build is a service's node-local view as View.Build made it, and its
// diff from the last flush (when it built).
type build struct {
	diff serviceDiff
	err  error
}

// NewTracker tracks view; the first Flush after MarkAll builds everything.
func NewTracker(view View) *Tracker {
	return &Tracker{view: view, dirty: map[string]bool{}, held: map[string]bool{}, built: map[string]build{},
		last: map[string][]*messages.ServicePortEndpoints{}}
}

// Affected applies e to view when the view takes events (Applier) and
// returns the services it changed; any other view already has the change,
// and e names the service.
func Affected(view any, e Event) []string {
	if a, ok := view.(Applier); ok {
		return a.Apply(e)
	}
	return []string{e.Service}
}

// Handle takes a source's event (Affected) and marks what it changed.
func (t *Tracker) Handle(e Event) {
	t.Events++
	for _, svc := range Affected(t.view, e) {
		t.mark(svc)
	}
}

// Mark records that service changed ("" means every service).
func (t *Tracker) Mark(service string) {
	t.Events++
	t.mark(service)
}

func (t *Tracker) mark(service string) {
	if service == "" {
		t.all = true
		return
	}
	t.dirty[service] = true
	delete(t.built, service) // out of date
}

// Pending reports whether a Flush has work.
func (t *Tracker) Pending() bool { return t.all || len(t.dirty) > 0 }

// Changes of one Flush.
type Changes struct {
	Upserts []*messages.ServicePortEndpoints
	Deletes []*messages.ServicePortKey
	// Errors are services that failed validation; their previous state is kept.
	Errors []error
	// Triggers are, by service, the trigger times of the changed services
	// whose View knows them (TriggerTimer): for the network programming
	// latency and traces.
	Triggers map[string]time.Time
}

// Flush rebuilds the dirty services and returns what changed.
func (t *Tracker) Flush() Changes {
	var services []string
	if t.all {
		services = t.view.ServiceNames()
		for svc := range t.last {
			if !slices.Contains(services, svc) {
				services = append(services, svc) // gone: its ports are deleted below
			}
		}
	} else {
		for svc := range t.dirty {
			services = append(services, svc)
		}
	}
	slices.Sort(services)
	built := t.built
	if t.all {
		built = nil // a full resync builds everything afresh
	}
	t.all, t.dirty, t.held, t.built = false, map[string]bool{}, map[string]bool{}, map[string]build{}

	var ch Changes
	for _, svc := range services {
		b, ok := built[svc]
		if !ok {
			b = t.build(svc)
		}
		if b.err != nil {
			ch.Errors = append(ch.Errors, b.err) // bad input must not drop what serves
			continue
		}
		t.apply(&ch, svc, b.diff)
	}
	return t.done(ch)
}

// FlushUnpaced rebuilds the dirty services not already held and returns
// the changes of those that need no pacing (only endpoints of existing
// service ports changed). The others are held for the next Flush, with
// their build and diff, which Flush applies unless the
// service changed again meanwhile (then it builds the latest); so is a
// service its view rejects (Flush reports it), and a full resync
// (Mark("")) as a whole. held says whether anything waits for Flush.
func (t *Tracker) FlushUnpaced() (ch Changes, held bool) {
	if t.all {
		return ch, true
	}
	var services []string
	for svc := range t.dirty {
		if !t.held[svc] {
			services = append(services, svc)
		}
	}
	slices.Sort(services)
	for _, svc := range services {
		b := t.build(svc)
		if b.err != nil || b.diff.paced {
			t.held[svc] = true
			t.built[svc] = b
			continue
		}
		delete(t.dirty, svc)
		t.apply(&ch, svc, b.diff)
	}
	return t.done(ch), len(t.held) > 0
}

// Holds says whether service's change waits for the paced Flush.
func (t *Tracker) Holds(service string) bool { return t.all || t.held[service] }

// build builds service and compares it with the last flush.
func (t *Tracker) build(svc string) build {
	ports, err := t.view.Build(svc)
	if err != nil {
		return build{err: err}
	}
	return build{diff: diffService(t.last[svc], ports)}
}

// apply adds service's diff to ch and records its ports as the service's
// state.
func (t *Tracker) apply(ch *Changes, svc string, d serviceDiff) {
	ch.Upserts = append(ch.Upserts, d.upserts...)
	ch.Deletes = append(ch.Deletes, d.deletes...)
	if len(d.next) == 0 {
		delete(t.last, svc)
	} else {
		t.last[svc] = d.next
	}
	if len(d.upserts)+len(d.deletes) > 0 {
		t.trigger(ch, svc)
	}
}

// trigger records service's trigger time in ch, when the view knows it.
func (t *Tracker) trigger(ch *Changes, service string) {
	tt, ok := t.view.(TriggerTimer)
	if !ok {
		return
	}
	if at := tt.TriggerTime(service); !at.IsZero() {
		if ch.Triggers == nil {
			ch.Triggers = map[string]time.Time{}
		}
		ch.Triggers[service] = at
	}
}

func (t *Tracker) done(ch Changes) Changes {
	slices.SortFunc(ch.Deletes, func(a, b *messages.ServicePortKey) int { return strings.Compare(a.ID(), b.ID()) })
	t.Changes += int64(len(ch.Upserts) + len(ch.Deletes))
	return ch
}

// State is every service port as of the last Flush, sorted by ID.
func (t *Tracker) State() []*messages.ServicePortEndpoints {
	var out []*messages.ServicePortEndpoints
	for _, ports := range t.last {
		for _, spe := range ports {
			out = append(out, spe)
		}
	}
	slices.SortFunc(out, func(a, b *messages.ServicePortEndpoints) int {
		return strings.Compare(a.GetServicePort().GetKey().ID(), b.GetServicePort().GetKey().ID())
	})
	return out
}

// portIndex is the IDs of a service's ports, in the order of its slice.
type portIndex []string

func portIDs(ports []*messages.ServicePortEndpoints) portIndex {
	ids := make(portIndex, len(ports))
	for i, spe := range ports {
		ids[i] = spe.GetServicePort().GetKey().ID()
	}
	return ids
}

// index is where id is, or -1. A linear search: a service has a few
// ports (a Service of hundreds is rare, and is searched once per port
// per change of it).
func (x portIndex) index(id string) int { return slices.Index(x, id) }
