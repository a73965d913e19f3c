package watcher

import (
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// serviceDiff is what changed in one service from its service ports as
// last flushed to those built now: the one comparison of a change, which
// both decides its pacing and gives its upserts and deletes.
type serviceDiff struct {
	// next is the service's ports as built, one per ID (the last of an
	// ID, as a map would keep).
	next    []*messages.ServicePortEndpoints
	upserts []*messages.ServicePortEndpoints
	deletes []*messages.ServicePortKey
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
		switch {
		case j < 0 || !proto.Equal(prev[j].GetServicePort(), spe.GetServicePort()):
			d.upserts, d.paced = append(d.upserts, spe), true
		case !proto.Equal(prev[j], spe):
			d.upserts = append(d.upserts, spe) // endpoints only
		}
	}
	for j, old := range prev {
		if ids.index(prevIDs[j]) < 0 {
			d.deletes, d.paced = append(d.deletes, old.GetServicePort().GetKey()), true
		}
	}
	return d
}
