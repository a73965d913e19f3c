package liveview

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// model is the live view's copy of the tree: each service port's last
// report, sorted ids for paging, and each actor's supervision history.
type model struct {
	proxierID string
	top       map[string]string // role -> PID id of the top actors that run
	stats     *datapath.StatsTable

	mu     sync.Mutex
	ports  map[string]*messages.ServicePortState // by service port id
	ids    []string                              // sorted, unless dirty; replaced, never changed in place
	lower  []string                              // ids in lower case, for the filter
	dirty  bool                                  // ids must be rebuilt from ports
	actors map[string]*actorState                // by PID id
	// byActor maps a ServicePort's PID id to its service port id.
	byActor  map[string]string
	restarts int64
}

func newModel(proxierID string, top map[string]string, stats *datapath.StatsTable) *model {
	return &model{proxierID: proxierID, top: top, stats: stats, ports: map[string]*messages.ServicePortState{},
		actors: map[string]*actorState{}, byActor: map[string]string{}}
}

// reported takes a service port's report and says what changed for the
// event stream: "" when the desired state did not (a restart's report,
// listeners, ejections).
func (m *model) reported(st *messages.ServicePortState) (change string) {
	id := st.GetKey().ID()
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.ports[id]
	if st.GetDeleted() {
		if old == nil {
			return ""
		}
		m.forget(id, old)
		return "deleted"
	}
	m.ports[id] = st
	if old == nil {
		// Sorted when next read: inserting each of 10,000 new service
		// ports in place would move the slice each time, on the
		// Proxier's goroutine.
		m.dirty = true
	} else if old.GetActorId() != st.GetActorId() {
		m.forgetActors(old.GetActorId())
	}
	m.byActor[st.GetActorId()] = id
	switch {
	case old == nil:
		return "added"
	case old.GetGeneration() != st.GetGeneration():
		return "updated"
	}
	return ""
}

// seed adds the service ports of a snapshot the subscription has not
// reported yet.
func (m *model) seed(snap *messages.StateSnapshot) {
	for _, st := range snap.GetServicePorts() {
		m.mu.Lock()
		known := m.ports[st.GetKey().ID()] != nil
		m.mu.Unlock()
		if !known {
			m.reported(st)
		}
	}
}

func (m *model) forget(id string, old *messages.ServicePortState) {
	delete(m.ports, id)
	m.dirty = true
	m.forgetActors(old.GetActorId())
}

// forgetActors drops the history of a ServicePort that is gone (a new
// service port of the same id gets a new PID id).
func (m *model) forgetActors(actorID string) {
	delete(m.byActor, actorID)
	delete(m.actors, actorID)
	for _, role := range []string{rolePortal, roleBalancer, roleAffinity} {
		delete(m.actors, actorID+"/"+role)
	}
}

// failed records an actor's failure; it returns the service port id and
// role of the actor ("" for a top actor).
func (m *model) failed(id string, at time.Time, reason string) (servicePort, role string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.actors[id]
	if a == nil {
		a = &actorState{}
		m.actors[id] = a
	}
	a.restarts++
	a.lastFailure = &Failure{At: at, Reason: reason}
	a.restarting = true
	m.restarts++
	return m.locate(id)
}

// back records that a failed actor answers again, took after its failure.
func (m *model) back(id string, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.actors[id]; a != nil {
		a.restarting, a.lastTook = false, took
	}
}

// locate names an actor by PID id: its service port and role, or "" and
// the top actor's role.
func (m *model) locate(id string) (servicePort, role string) {
	spActor, role, ok := splitActorID(id, m.proxierID)
	if ok {
		return m.byActor[spActor], role
	}
	for r, pid := range m.top {
		if pid == id {
			return "", r
		}
	}
	return "", id
}

// alive says whether the actor's service port is still there (a top
// actor always is).
func (m *model) alive(id string) bool {
	spActor, _, ok := splitActorID(id, m.proxierID)
	if !ok {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, known := m.byActor[spActor]
	return known
}

// Tree is GET /api/tree: the top of the tree and totals.
type Tree struct {
	Supervisor     string  `json:"supervisor"`
	Top            []Actor `json:"top"`
	ServicePorts   int     `json:"servicePorts"`
	Restarts       int64   `json:"restarts"`
	FaultInjection bool    `json:"faultInjection"`
	// StormKinds are the actor kinds a storm may crash here.
	StormKinds []string `json:"stormKinds,omitempty"`
}

func (m *model) tree() Tree {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := Tree{Supervisor: "kproxy", ServicePorts: len(m.ports), Restarts: m.restarts}
	for _, role := range []string{"watcher", "proxier", "rules"} {
		if id := m.top[role]; id != "" {
			t.Top = append(t.Top, m.actors[id].view(role, id))
		}
	}
	return t
}

// Page is GET /api/servicePorts: one page of the service ports whose id
// contains the filter.
type Page struct {
	Total   int    `json:"total"`   // service ports in all
	Matched int    `json:"matched"` // of them, those the filter matched
	Offset  int    `json:"offset"`
	Limit   int    `json:"limit"`
	Items   []*Row `json:"items"`
}

func (m *model) page(q string, offset, limit int) Page {
	ids, lower := m.sorted()
	p := Page{Total: len(ids), Offset: offset, Limit: limit, Items: []*Row{}}
	// The filter runs without the lock, over the sorted ids (never changed
	// in place): the Proxier's reports wait on it only while the page's
	// own rows are built.
	q = strings.ToLower(q)
	var shown []string
	for i, id := range ids {
		if q != "" && !strings.Contains(lower[i], q) {
			continue
		}
		if p.Matched >= offset && len(shown) < limit {
			shown = append(shown, id)
		}
		p.Matched++
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range shown {
		if m.ports[id] != nil { // not deleted since the ids were taken
			p.Items = append(p.Items, m.row(id))
		}
	}
	return p
}

// rowOf is the row of one service port, nil when it is gone.
func (m *model) rowOf(id string) *Row {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ports[id] == nil {
		return nil
	}
	return m.row(id)
}

// count is how many service ports there are.
func (m *model) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ports)
}

// sorted returns the service port ids, sorted, and the same in lower case
// for the filter. After service ports came or went they are sorted again,
// outside the lock: sorting 10,000 ids on a report's path would make the
// Proxier wait for it. The slices are replaced, never changed in place.
func (m *model) sorted() (ids, lower []string) {
	m.mu.Lock()
	if !m.dirty {
		ids, lower = m.ids, m.lower
		m.mu.Unlock()
		return ids, lower
	}
	ids = make([]string, 0, len(m.ports))
	for id := range m.ports {
		ids = append(ids, id)
	}
	m.dirty = false
	m.mu.Unlock()
	slices.Sort(ids)
	lower = make([]string, len(ids))
	for i, id := range ids {
		lower[i] = strings.ToLower(id)
	}
	m.mu.Lock()
	if !m.dirty { // nothing came or went meanwhile: these are current
		m.ids, m.lower = ids, lower
	}
	m.mu.Unlock()
	return ids, lower
}
