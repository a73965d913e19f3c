package actors

import (
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/balancer"
)

// actorKinds are the Props of the actors spawned per service port, one
// per kind for the whole tree. An actor finds the record it borrows by
// its ServicePort's name (recordIndex, Config.borrow), so a spawn makes
// no Props, producer or closure of its own, and an idle service port's
// heap holds none.
type actorKinds struct {
	servicePort, portal, balancer, affinity *actor.Props
}

func newActorKinds(c *Config) *actorKinds {
	return &actorKinds{
		servicePort: c.propsFor(func() actor.Actor { return &ServicePort{cfg: c} }),
		portal:      c.propsFor(func() actor.Actor { return &Portal{cfg: c} }),
		balancer: c.propsFor(func() actor.Actor {
			return &Balancer{cfg: c, scopes: balancer.NewScopes(nil), outliers: balancer.NewOutliers(c.Outliers)}
		}),
		affinity: c.propsFor(func() actor.Actor { return &Affinity{cfg: c} }),
	}
}

// borrow sets *rec, if not yet, to the record of the ServicePort whose
// PID is servicePort. Called first in Receive, not on Started: a message
// posted to an actor respawned under the same name while it spawned is
// delivered before Started (spawnSafeMailbox).
func (c *Config) borrow(rec **record, servicePort *actor.PID) {
	if *rec == nil {
		*rec = c.records.of(servicePort)
	}
}

// child are the Props of a ServicePort's child of role.
func (k *actorKinds) child(role string) *actor.Props {
	switch role {
	case rolePortal:
		return k.portal
	case roleBalancer:
		return k.balancer
	default:
		return k.affinity
	}
}

// recordIndex finds a record by its ServicePort's actor name, which is
// unique per record (recordName). The Proxier adds a record before it
// spawns its ServicePort; the ServicePort of a deleted record removes it
// once its children have stopped, so every incarnation of them finds it.
type recordIndex struct {
	mu sync.RWMutex
	m  map[string]*record
}

func newRecordIndex() *recordIndex { return &recordIndex{m: map[string]*record{}} }

func (x *recordIndex) put(rec *record) {
	x.mu.Lock()
	x.m[rec.name] = rec
	x.mu.Unlock()
}

func (x *recordIndex) remove(rec *record) {
	x.mu.Lock()
	if x.m[rec.name] == rec {
		delete(x.m, rec.name)
	}
	x.mu.Unlock()
}

// of is the record of the ServicePort whose PID is servicePort (nil: none).
func (x *recordIndex) of(servicePort *actor.PID) *record {
	id := servicePort.GetId()
	name := id[strings.LastIndexByte(id, '/')+1:]
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.m[name]
}
