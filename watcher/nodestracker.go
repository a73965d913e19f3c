package watcher

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// NodesTracker is a core's Tracker: one source's views kept for many
// members (subscribed backends, each serving one node). A change is built
// once per class of nodes that see the service alike (Classifier) and
// diffed once per pair of views members move between, so it costs what it
// changes plus a lookup per member, not a build and a diff per node. What
// a member holds is a shared view, by pointer; per member it keeps only
// its own: its zone, and the views of what it was not sent yet.
//
// Only one goroutine may use it (the core's actor).
type NodesTracker struct {
	views    NodeViews
	classify Classifier // nil: every node is its own class
	triggers TriggerTimer
	services map[string]*serviceViews
	members  map[string]*member
	dirty    map[string]bool
	// held are dirty services whose change needs the paced Flush: the
	// unpaced one leaves them.
	held map[string]bool

	// Events counts marks, Changes the upserts and deletes of shared
	// pieces flushed (each counted once, however many members get it).
	Events, Changes int64
}

// ClassView is one class's view of a service, as every member of the
// class holds it. It never changes once made: members share it by pointer.
type ClassView struct {
	Ports []*messages.ServicePortEndpoints
	// Memo is free for the consumer to keep a derived form of Ports in
	// (the core's wire encoding), made once for every member.
	Memo []byte
}

// serviceViews is a service as of its last flush: its classes and the
// view of each class some member holds.
type serviceViews struct {
	classes Classes
	views   map[string]*ClassView
}

type member struct {
	node, zone string
	// owed are the services changed since the member was last sent them,
	// each with the view it holds (nil: none).
	owed map[string]*ClassView
	// ports is how many service ports it holds (the core's page).
	ports int
}

// Piece is one service's change from one view to another: every member
// moving between the same two views gets the same Piece.
type Piece struct {
	Service string
	Upserts []*messages.ServicePortEndpoints
	// OnlyEndpoints says, for each upsert, that only its endpoints
	// changed: the member holds its definition as it is.
	OnlyEndpoints []bool
	Deletes       []*messages.ServicePortKey
	// Trigger is the service's EndpointSlice trigger time, when the
	// source knows it (TriggerTimer).
	Trigger time.Time
	// Memo and CompactMemo are free for the consumer: the core's wire
	// encodings, with whole upserts and with endpoint updates.
	Memo, CompactMemo []byte

	paced bool
	added int // service ports after, minus before
}

// Compact is p's upserts with those that changed only endpoints as
// updates (the member keeps the definition it holds), each carrying p's
// trigger time.
func (p *Piece) Compact() (upserts []*messages.ServicePortEndpoints, updates []*messages.EndpointsUpdate) {
	var trigger int64
	if !p.Trigger.IsZero() {
		trigger = p.Trigger.UnixNano()
	}
	for i, spe := range p.Upserts {
		if i < len(p.OnlyEndpoints) && p.OnlyEndpoints[i] {
			updates = append(updates, &messages.EndpointsUpdate{Key: spe.GetServicePort().GetKey(), Endpoints: spe.GetEndpoints(),
				TriggerUnixNano: trigger})
		} else {
			upserts = append(upserts, spe)
		}
	}
	return upserts, updates
}

// Empty says whether the piece changes nothing.
func (p *Piece) Empty() bool { return len(p.Upserts) == 0 && len(p.Deletes) == 0 }

// Flushed is what one flush changed: by member ID, the pieces it gets,
// in service order.
type Flushed struct {
	Members map[string][]*Piece
	// Errors are services that failed validation; every member keeps its
	// previous view of them.
	Errors []error
	// Held says whether some change waits for the paced Flush.
	Held bool
}

// NewNodesTracker tracks views for members added later.
func NewNodesTracker(views NodeViews) *NodesTracker {
	t := &NodesTracker{views: views, services: map[string]*serviceViews{}, members: map[string]*member{},
		dirty: map[string]bool{}, held: map[string]bool{}}
	t.classify, _ = views.(Classifier)
	t.triggers, _ = views.(TriggerTimer)
	return t
}

// Mark records that service changed ("" means every service).
func (t *NodesTracker) Mark(service string) {
	t.Events++
	if service != "" {
		t.dirty[service] = true
		return
	}
	for svc := range t.services {
		t.dirty[svc] = true
	}
	for _, svc := range t.serviceNames() {
		t.dirty[svc] = true
	}
}

// serviceNames is every service the source holds.
func (t *NodesTracker) serviceNames() []string {
	if t.classify != nil {
		return t.classify.ServiceNames()
	}
	for _, m := range t.members {
		return t.views.ViewFor(m.node).ServiceNames()
	}
	return nil
}

// MarkNode records that node's view of every service may have changed
// (its zone): its members are owed everything, from what they hold.
func (t *NodesTracker) MarkNode(node string) {
	t.Events++
	zone := t.zone(node)
	for _, m := range t.members {
		if m.node != node || m.zone == zone {
			continue
		}
		for svc, sv := range t.services {
			if _, ok := m.owed[svc]; !ok {
				m.owe(svc, sv.views[t.key(sv.classes, m)])
			}
		}
		m.zone = zone
	}
}

// Owes says whether member id was not sent some change yet.
func (t *NodesTracker) Owes(id string) bool {
	m := t.members[id]
	return m != nil && len(m.owed) > 0
}

// Pending reports whether a Flush has work.
func (t *NodesTracker) Pending() bool {
	if len(t.dirty) > 0 {
		return true
	}
	for _, m := range t.members {
		if len(m.owed) > 0 {
			return true
		}
	}
	return false
}

// Add makes id a member serving node and returns its whole view, by
// service (sorted), each view shared with the members of its class.
func (t *NodesTracker) Add(id, node string) []*ClassView {
	m := &member{node: node, zone: t.zone(node)}
	t.members[id] = m
	return t.Snapshot(id)
}

// Remove forgets member id.
func (t *NodesTracker) Remove(id string) {
	m := t.members[id]
	if m == nil {
		return
	}
	delete(t.members, id)
	// A node's own class goes with its last member.
	for _, o := range t.members {
		if o.node == m.node {
			return
		}
	}
	own := "node/" + m.node + "/"
	for _, sv := range t.services {
		for key := range sv.views {
			if strings.HasPrefix(key, own) {
				delete(sv.views, key)
			}
		}
	}
}

// Members is how many members there are.
func (t *NodesTracker) Members() int { return len(t.members) }

// Ports is how many service ports member id holds.
func (t *NodesTracker) Ports(id string) int {
	if m := t.members[id]; m != nil {
		return m.ports
	}
	return 0
}

// Snapshot is member id's whole view as of now, by service (sorted), for a
// member that starts again from nothing: nothing is owed to it after.
func (t *NodesTracker) Snapshot(id string) []*ClassView {
	m := t.members[id]
	if m == nil {
		return nil
	}
	names := t.serviceNames()
	for svc := range t.services {
		names = append(names, svc) // one gone, not flushed yet: members still hold it
	}
	slices.Sort(names)
	names = slices.Compact(names)
	m.owed, m.ports = nil, 0
	var out []*ClassView
	for _, svc := range names {
		v := t.current(svc, m)
		if v != nil && len(v.Ports) > 0 {
			out = append(out, v)
			m.ports += len(v.Ports)
		}
	}
	return out
}

// current is the view member m gets of svc when it gets it now: its
// class's, as members of the class hold it, or else built now (nil when
// it fails validation: m holds nothing of it). A view built for a class
// no member holds becomes the class's, unless the service changed since
// its classes were made: then it is m's alone (owed: what m holds), and
// the next flush moves m on from it.
func (t *NodesTracker) current(svc string, m *member) *ClassView {
	sv := t.services[svc]
	if sv == nil {
		sv = &serviceViews{classes: t.classesOf(svc), views: map[string]*ClassView{}}
		t.services[svc] = sv
	}
	key := t.key(sv.classes, m)
	if v, ok := sv.views[key]; ok {
		return v
	}
	ports, err := t.views.ViewFor(m.node).Build(svc)
	if err != nil {
		return nil
	}
	v := &ClassView{Ports: diffService(nil, ports).next}
	if t.dirty[svc] {
		m.owe(svc, v)
	} else {
		sv.views[key] = v
	}
	return v
}

// Flush builds the dirty services' views and returns what each member
// gets. With unpaced, a service whose change some member must get paced
// (diffService's paced) is held for the next paced Flush. skip names
// members not sent anything now (a slow backend): they are owed the
// changes, from the views they hold.
func (t *NodesTracker) Flush(unpaced bool, skip func(id string) bool) Flushed {
	out := Flushed{Members: map[string][]*Piece{}}
	var services []string
	for svc := range t.dirty {
		if !unpaced || !t.held[svc] {
			services = append(services, svc)
		}
	}
	slices.Sort(services)
	ids := slices.Sorted(maps.Keys(t.members))
	for _, svc := range services {
		t.flushService(svc, ids, unpaced, skip, &out)
	}
	// Members owed services not flushed above get them from their views.
	for _, id := range ids {
		m := t.members[id]
		if len(m.owed) == 0 || (skip != nil && skip(id)) {
			continue
		}
		for _, svc := range slices.Sorted(maps.Keys(m.owed)) {
			if t.dirty[svc] {
				continue // held: the paced Flush has it
			}
			from := m.owed[svc]
			p := t.piece(svc, from, t.current(svc, m))
			if unpaced && p.paced {
				out.Held = true
				continue
			}
			delete(m.owed, svc)
			m.take(id, p, &out)
		}
	}
	out.Held = out.Held || len(t.held) > 0
	return out
}

// FlushOwed gives member id, at once, the changes it is owed (it was
// skipped while slow): from the views it holds to its class's as members
// of the class hold them now, paced or not. A service changed since is
// still dirty, and the next Flush moves it on with the others.
func (t *NodesTracker) FlushOwed(id string) []*Piece {
	m := t.members[id]
	if m == nil {
		return nil
	}
	out := Flushed{Members: map[string][]*Piece{}}
	for _, svc := range slices.Sorted(maps.Keys(m.owed)) {
		from := m.owed[svc]
		delete(m.owed, svc)
		// current may owe svc again: a dirty service's view built for m
		// alone, which m then holds.
		m.take(id, t.piece(svc, from, t.current(svc, m)), &out)
	}
	return out.Members[id]
}

// flushService builds one service's new views, member by member, and
// gives each member the piece from the view it holds to its new one.
func (t *NodesTracker) flushService(svc string, ids []string, unpaced bool, skip func(string) bool, out *Flushed) {
	old := t.services[svc]
	if old == nil {
		old = &serviceViews{}
	}
	next := &serviceViews{classes: t.classesOf(svc), views: map[string]*ClassView{}}
	type move struct {
		from *ClassView
		to   string
	}
	pieces := map[move]*Piece{}
	given := make([]*Piece, len(ids))
	froms := make([]*ClassView, len(ids))
	paced := false
	for i, id := range ids {
		m := t.members[id]
		from, owed := m.owed[svc]
		if !owed {
			from = old.views[t.key(old.classes, m)]
		}
		froms[i] = from
		key := t.key(next.classes, m)
		to, ok := next.views[key]
		if !ok {
			ports, err := t.views.ViewFor(m.node).Build(svc)
			if err != nil {
				// Every member keeps what it holds, as a node's
				// Tracker keeps a rejected service's last state.
				out.Errors = append(out.Errors, err)
				delete(t.dirty, svc)
				delete(t.held, svc)
				return
			}
			prev := old.views[key]
			var prevPorts []*messages.ServicePortEndpoints
			if prev != nil {
				prevPorts = prev.Ports
			}
			d := diffService(prevPorts, ports)
			if prev != nil && len(d.upserts)+len(d.deletes) == 0 {
				to = prev // unchanged: the very view members of the class hold
			} else {
				to = &ClassView{Ports: d.next}
			}
			next.views[key] = to
		}
		p, ok := pieces[move{from, key}]
		if !ok {
			p = t.piece(svc, from, to)
			pieces[move{from, key}] = p
			paced = paced || p.paced
		}
		given[i] = p
	}
	if unpaced && paced {
		t.held[svc] = true
		return
	}
	delete(t.dirty, svc)
	delete(t.held, svc)
	if len(next.views) == 0 || allEmpty(next.views) {
		delete(t.services, svc)
	} else {
		t.services[svc] = next
	}
	for _, p := range pieces {
		t.Changes += int64(len(p.Upserts) + len(p.Deletes))
	}
	for i, id := range ids {
		m, p := t.members[id], given[i]
		if skip != nil && skip(id) {
			if !p.Empty() {
				m.owe(svc, froms[i]) // what it holds, owed or not
			}
			continue
		}
		delete(m.owed, svc)
		m.take(id, p, out)
	}
}

// piece diffs two views of svc.
func (t *NodesTracker) piece(svc string, from, to *ClassView) *Piece {
	var a, b []*messages.ServicePortEndpoints
	if from != nil {
		a = from.Ports
	}
	if to != nil {
		b = to.Ports
	}
	d := diffService(a, b)
	p := &Piece{Service: svc, Upserts: d.upserts, OnlyEndpoints: d.onlyEndpoints, Deletes: d.deletes, paced: d.paced,
		added: len(b) - len(a)}
	if !p.Empty() && t.triggers != nil {
		p.Trigger = t.triggers.TriggerTime(svc)
	}
	return p
}

func (m *member) owe(svc string, holds *ClassView) {
	if m.owed == nil {
		m.owed = map[string]*ClassView{}
	}
	m.owed[svc] = holds
}

// take gives member id piece p.
func (m *member) take(id string, p *Piece, out *Flushed) {
	if p.Empty() {
		return
	}
	m.ports += p.added
	out.Members[id] = append(out.Members[id], p)
}

func allEmpty(views map[string]*ClassView) bool {
	for _, v := range views {
		if len(v.Ports) > 0 {
			return false
		}
	}
	return true
}

func (t *NodesTracker) classesOf(svc string) Classes {
	if t.classify == nil {
		return Classes{}
	}
	return t.classify.Classes(svc)
}

func (t *NodesTracker) key(c Classes, m *member) string {
	if t.classify == nil {
		return ownClasses(m.node)
	}
	return c.Key(m.node, m.zone)
}

func (t *NodesTracker) zone(node string) string {
	if t.classify == nil {
		return ""
	}
	return t.classify.Zone(node)
}
