package watcher

import (
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// NeedsPacing says whether a service's change from prev (its service
// ports as last flushed) to next (as built now) must wait for a paced
// flush, as kube-proxy's minSyncPeriod paces the programming of kernel
// rules. A change is unpaced only when the service keeps exactly its
// service ports and each keeps its whole definition (IPs, ports,
// protocol, policies, affinity): only endpoints differ, which programs no
// kernel rule and opens no listener in a userspace proxy, only the
// balancer's state. Anything else (a service port added or removed, any
// field of one changed) may need rules or listeners, so it is paced.
func NeedsPacing(prev, next []*messages.ServicePortEndpoints) bool {
	ids := make(portIndex, 0, len(next))
	last := make([]*messages.ServicePortEndpoints, 0, len(next))
	for _, spe := range next {
		id := spe.GetServicePort().GetKey().ID()
		if i := ids.index(id); i >= 0 {
			last[i] = spe // the last of one ID, as Flush keeps
			continue
		}
		ids, last = append(ids, id), append(last, spe)
	}
	if len(last) != len(prev) {
		return true
	}
	prevIDs := portIDs(prev)
	for i, spe := range last {
		j := prevIDs.index(ids[i])
		if j < 0 || !proto.Equal(prev[j].GetServicePort(), spe.GetServicePort()) {
			return true
		}
	}
	return false
}
