package actors

import (
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/watcher"
)

// record is everything a service port holds for as long as it is in the
// desired state, whichever actor incarnations come and go: its sockets,
// its proxy ports, the
// configuration its children build from, the Snapshot its connections pick
// from and its affinity pins. The Proxier creates it when the service port
// appears and marks it deleted when the service port goes; the ServicePort
// that stops then releases it. Each of its actors' incarnations is made
// with it (Config.spawnProps), so a crash of any of them, or of the
// Proxier above them, loses none of it.
//
// Who touches what: the Proxier writes upsert and deleted and keeps
// reported; the ServicePort (one incarnation at a time) writes the rest
// and stores the children's configuration, which the children read;
// the Affinity actor alone uses pins once the ServicePort made them.
type record struct {
	id string
	// name is the ServicePort's actor name under the Proxier: unique per
	// record, because a deleted service port of the same key may still be
	// stopping.
	name string
	// sockets are the service port's listening sockets, which the Portal
	// serves and the ServicePort closes when the service port is deleted.
	sockets *datapath.Sockets

	// upsert is the desired state the Watcher last gave. The Proxier
	// stores it before it tells the ServicePort, so a (re)started
	// ServicePort reads the latest.
	upsert atomic.Pointer[messages.UpsertServicePort]
	// deleted is set when the service port left the desired state.
	deleted atomic.Bool
	// reported is the ServicePort's last report (the Proxier's).
	reported *messages.ServicePortState

	// The children's configuration, replaced whole (never changed in
	// place) by the ServicePort before it tells them: a child that starts
	// reads it, so it needs no round trip to be configured.
	portal    atomic.Pointer[messages.ConfigurePortal]
	endpoints atomic.Pointer[messages.SetEndpoints]
	// snapshots is where the Balancer publishes its picks for the service
	// port's connections (see setEndpoints for the rule they follow).
	snapshots balancer.SnapshotHolder
	// local holds the addresses ("ip:port") of the endpoints on this
	// node, for a pick to say whether its endpoint is (transparent
	// proxying dials only those from the client's address).
	local atomic.Pointer[map[string]bool]
	// pins is the ClientIP affinity table, made the first time the
	// service has ClientIP affinity; only the Affinity actor uses it.
	pins *balancer.ScopedAffinity

	// The ServicePort's, whichever incarnation runs.
	applied            *messages.UpsertServicePort // the desired state applied
	trace              *messages.TraceContext      // the last applied change's (tracing only)
	proxyPort, extPort int                         // extPort: for external traffic under a Local policy, or 0
	externalIsCluster  bool                        // extPort serves the cluster scope (steer.ClusterScopeOnExternalPort)
	portErr            error                       // why there is no proxy port yet
	portRetry          time.Duration               // wait before the next try to allocate it
	portalVersion      int64
	status             portStatus
}

// portStatus is what the ServicePort reports beside the applied desired
// state. Each report is a new ServicePortState built from it, which the
// Proxier keeps: the fields are only ever replaced, never changed in
// place, so the report shares them. (Keeping a ServicePortState here too
// would hold a second one per service port.)
type portStatus struct {
	started  bool // the first ServicePort incarnation has started
	restarts int32
	listen   []string
	err      string
	failures []*messages.Failure
	ejected  []*messages.EjectedEndpoint
}

// stateReport is the service port's state for the Proxier; actorID is
// its ServicePort's.
func (r *record) stateReport(actorID string) *messages.ServicePortState {
	sp := r.applied.GetServicePort()
	if note := watcher.RemoteEndpointsNote(r.applied.GetEndpoints()); sp.GetPreserveSourceIp() && note != "" {
		sp = proto.CloneOf(sp) // the applied one is shared with the Tracker and the children
		sp.AnnotationErrors = append(sp.AnnotationErrors, note)
	}
	return &messages.ServicePortState{
		Key: sp.GetKey(), ServicePort: sp, Endpoints: r.applied.GetEndpoints(), Generation: r.applied.GetGeneration(),
		ListenAddresses: r.status.listen, ProxyPort: int32(r.proxyPort), ExternalProxyPort: int32(r.extPort),
		Restarts: r.status.restarts, Error: r.status.err, Failures: r.status.failures, Ejected: r.status.ejected,
		ActorId: actorID,
	}
}

// recordName names the ServicePort of a new record: the service port's ID
// with "/" (protoactor's path separator) replaced, and a sequence number.
func recordName(id string, seq int64) string {
	return servicePortPrefix(id) + strconv.FormatInt(seq, 10)
}

// setEndpoints makes set the service port's endpoint set, for the
// children's next incarnations; the ServicePort then sends it to the
// running ones. This is the one consistency rule of picks: from here until
// the Balancer publishes a Snapshot built from set, SnapshotHolder.Load
// returns nil and connections ask the Balancer actor, whose mailbox has
// set before any question asked after the service port reports it. So no
// connection picks from endpoints older than what the service port
// reports after this call.
func (r *record) setEndpoints(set *messages.SetEndpoints) {
	// Made only when an endpoint is local: most service ports have none,
	// and an empty map per port is memory every idle port would carry.
	var local map[string]bool
	for _, e := range set.GetEndpoints() {
		if e.GetLocal() {
			if local == nil {
				local = map[string]bool{}
			}
			local[e.Address()] = true
		}
	}
	if local == nil {
		r.local.Store(nil)
	} else {
		r.local.Store(&local)
	}
	set.Version = r.snapshots.Expect()
	r.endpoints.Store(set)
}

// isLocal reports whether endpoint ("ip:port") is on this node.
func (r *record) isLocal(endpoint string) bool {
	m := r.local.Load()
	return m != nil && (*m)[endpoint]
}

// configurePortal makes c the Portal's configuration.
func (r *record) configurePortal(c *messages.ConfigurePortal) {
	r.portalVersion++
	c.Version = r.portalVersion
	r.portal.Store(c)
}
