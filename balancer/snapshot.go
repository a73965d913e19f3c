package balancer

import (
	"sync/atomic"
)

// Snapshot is a read-only view of a Balancer's choices, for connections to
// pick from without a round trip to the actor that owns Scopes and
// Outliers: the actor builds a new Snapshot whenever its endpoints or its
// outlier records change and publishes it (SnapshotHolder); connection
// goroutines only read it. The one thing they write is each pool's
// round-robin position, an atomic counter the actor carries over from one
// Snapshot to the next (Positions), so publishing does not restart the
// rotation.
type Snapshot struct {
	pools [2][3]snapshotPool // by external, then family
	// watched are the endpoints with an outlier record: a dial's outcome
	// is wanted even when it succeeds.
	watched map[string]struct{}
	// Watching is set when any endpoint has a record.
	Watching bool
	// Version is that of the endpoint set it was built from (see
	// SnapshotHolder.Expect).
	Version int64
	// pos are the pools' round-robin positions, shared with the
	// Snapshots before and after (one pointer, not one per pool: 64
	// bytes of every service port).
	pos *Positions
}

type snapshotPool struct {
	endpoints []string            // in round-robin order
	skip      map[string]struct{} // ejected endpoints to pass over
}

// Positions are the round-robin positions of a Balancer's pools, kept by
// its actor across Snapshots.
type Positions struct {
	next [2][3]atomic.Uint64
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Snapshot builds a Snapshot of s with o's ejections and records, sharing
// the positions pos and s's endpoint lists (which s replaces, never
// changes).
func (s *Scopes) Snapshot(o *Outliers, pos *Positions) *Snapshot {
	snap := &Snapshot{Watching: o.Watching(), pos: pos}
	if len(o.hosts) > 0 {
		snap.watched = make(map[string]struct{}, len(o.hosts))
		for e := range o.hosts {
			snap.watched[e] = struct{}{}
		}
	}
	for i := range s.pools {
		for f := range s.pools[i] {
			snap.pools[i][f] = poolSnapshot(&s.pools[i][f], o)
		}
	}
	return snap
}

// poolSnapshot is the Snapshot of one pool rr, with o's skips. It shares
// rr's list: RoundRobin.Update replaces the list, never changes it in
// place.
func poolSnapshot(rr *RoundRobin, o *Outliers) snapshotPool {
	sp := snapshotPool{endpoints: rr.endpoints}
	// The ejected members Outliers.Skip would add to a pick's
	// exclusions (none when the panic threshold is crossed).
	if skip := o.Skip(rr.endpoints, nil); len(skip) > 0 {
		sp.skip = make(map[string]struct{}, len(skip))
		for _, e := range skip {
			sp.skip[e] = struct{}{}
		}
	}
	return sp
}

// Pick chooses the next endpoint for a client (its IP decides the family)
// in the external or internal scope, passing over ejected endpoints and
// those in exclude, as the actor's own pick (Scopes.Next after
// Outliers.Skip) would; report is set when the dial's outcome is wanted
// even on success. ok is false when no endpoint is left. Safe for
// concurrent use; it does not allocate.
func (s *Snapshot) Pick(external bool, clientIP string, exclude []string) (endpoint string, report, ok bool) {
	ext, fam := boolIndex(external), familyOf(clientIP)
	p := &s.pools[ext][fam]
	n := uint64(len(p.endpoints))
	if n == 0 {
		return "", false, false
	}
	start := s.pos.next[ext][fam].Add(1) - 1
	for i := range n {
		e := p.endpoints[(start+i)%n]
		if _, ejected := p.skip[e]; ejected || (len(exclude) > 0 && contains(exclude, e)) {
			continue
		}
		_, report = s.watched[e]
		return e, report, true
	}
	return "", false, false
}

// SnapshotHolder is where a Balancer publishes its Snapshot for the
// connections of its service port. A nil Snapshot means none is
// published: ask the actor.
type SnapshotHolder struct {
	p atomic.Pointer[Snapshot]
	// want is the version of the latest endpoint set.
	want atomic.Int64
	// Positions outlive the Balancer's incarnations, as the holder does.
	Positions Positions
}

// Load returns the published Snapshot if it was built from the latest
// endpoint set (Expect), or nil: until the Balancer applied that set the
// Snapshot is stale, and a connection asks the actor, which applies the
// latest set before it picks. Without this a service port reported its
// new endpoints before its Balancer had applied them, and a connection
// made after the report could still reach a removed endpoint.
func (h *SnapshotHolder) Load() *Snapshot {
	want := h.want.Load()
	if snap := h.p.Load(); snap != nil && snap.Version >= want {
		return snap
	}
	return nil
}

// Expect returns the version of a new endpoint set: until the Balancer
// publishes a Snapshot of it, Load returns nil.
func (h *SnapshotHolder) Expect() int64 { return h.want.Add(1) }

// Store publishes snap (nil withdraws it).
func (h *SnapshotHolder) Store(snap *Snapshot) { h.p.Store(snap) }
