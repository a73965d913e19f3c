package watcher

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// serviceDiff is what changed in one service from its service ports as
// last flushed to those built now: the one comparison of a change, which
// both decides its pacing and gives its upserts and deletes.
//
// What did not change is handed on as the very message last flushed: an
// upsert whose endpoints did not change carries the previous Endpoints
// slice, one whose service port did not change the previous ServicePort.
// Downstream (the ServicePort actor) tells what changed by identity and
// never compares again; a message skipped on the way (a crash) still
// shows as a change, since what changed in it has a new identity.
type serviceDiff struct {
	// next is the service's ports as built, one per ID (the last of an
	// ID, as a map would keep), sharing what did not change with the
	// previous flush.
	next    []*messages.ServicePortEndpoints
	upserts []*messages.ServicePortEndpoints
	// onlyEndpoints says, for each upsert, that its definition did not
	// change (it carries the very ServicePort last flushed): a core sends
	// such a change as an EndpointsUpdate.
	onlyEndpoints []bool
	deletes       []*messages.ServicePortKey
	// paced: the change must wait for a paced flush, as kube-proxy's
	// minSyncPeriod paces the programming of kernel rules. Only a change
	// that keeps exactly the service's ports, each with its whole
	// definition (IPs, ports, protocol, policies, affinity), is unpaced:
	// only endpoints differ, which programs no kernel rule and opens no
	// listener in a userspace proxy, only the balancer's state.
	paced bool
}

// diffService compares prev (a service's ports as last flushed) with ports
// (as built now).
func diffService(prev, ports []*messages.ServicePortEndpoints) serviceDiff {
	d := serviceDiff{next: make([]*messages.ServicePortEndpoints, 0, len(ports))}
	ids := make(portIndex, 0, len(ports))
	for _, spe := range ports {
		id := spe.GetServicePort().GetKey().ID()
		if i := ids.index(id); i >= 0 {
			d.next[i] = spe
			continue
		}
		d.next, ids = append(d.next, spe), append(ids, id)
	}
	prevIDs := portIDs(prev)
	for i, spe := range d.next {
		j := prevIDs.index(ids[i])
		if j < 0 {
			d.upsert(spe, false)
			d.paced = true
			continue
		}
		old := prev[j]
		spSame := old.GetServicePort() == spe.GetServicePort() || proto.Equal(old.GetServicePort(), spe.GetServicePort())
		epSame := SameEndpoints(old.GetEndpoints(), spe.GetEndpoints()) || equalEndpoints(old.GetEndpoints(), spe.GetEndpoints())
		switch {
		case spSame && epSame:
			d.next[i] = old
		case spSame: // endpoints only: no pacing
			d.next[i] = &messages.ServicePortEndpoints{ServicePort: old.GetServicePort(), Endpoints: spe.GetEndpoints()}
			d.upsert(d.next[i], true)
		case epSame:
			d.next[i] = &messages.ServicePortEndpoints{ServicePort: spe.GetServicePort(), Endpoints: old.GetEndpoints()}
			d.upsert(d.next[i], false)
			d.paced = true
		default:
			d.upsert(spe, false)
			d.paced = true
		}
	}
	for j, old := range prev {
		if ids.index(prevIDs[j]) < 0 {
			d.deletes, d.paced = append(d.deletes, old.GetServicePort().GetKey()), true
		}
	}
	return d
}

func (d *serviceDiff) upsert(spe *messages.ServicePortEndpoints, onlyEndpoints bool) {
	d.upserts = append(d.upserts, spe)
	d.onlyEndpoints = append(d.onlyEndpoints, onlyEndpoints)
}

// SameEndpoints reports whether a and b are the same endpoint list, as
// diffService hands an unchanged one on: the same slice, not a copy.
func SameEndpoints(a, b []*messages.Endpoint) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func equalEndpoints(a, b []*messages.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *messages.Endpoint) bool { return proto.Equal(x, y) })
}
