package balancer

import "math/rand/v2"

// RoundRobin picks endpoints ("ip:port" strings) in turn.
//
// A RoundRobin is not safe for concurrent use; it is owned by a single actor
// (see the package doc).
type RoundRobin struct {
	rand      *rand.Rand
	endpoints []string            // current order, no duplicates; replaced, never changed in place (Snapshots share it)
	set       map[string]struct{} // same members as endpoints, only above smallSet
	pos       int                 // index of the next candidate in endpoints
}

// NewRoundRobin returns an empty RoundRobin. rand is used to shuffle the
// endpoints whenever the set changes; nil means a source seeded at random.
func NewRoundRobin(rand *rand.Rand) *RoundRobin {
	if rand == nil {
		rand = newDefaultRand()
	}
	return &RoundRobin{rand: rand}
}

// smallSet is the most endpoints looked up by scanning the list rather
// than a map: each of a service port's six pools would hold a map, and
// most service ports have a few endpoints.
const smallSet = 8

func newDefaultRand() *rand.Rand {
	// The top-level functions of math/rand/v2 are randomly seeded.
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// Update replaces the endpoint set. When the set really changed (as a set:
// order-insensitive, duplicates ignored) it is shuffled and the position
// reset, so that many proxies don't all start on the same endpoint
// (kube-proxy userspace did this); when the set is the same it keeps order
// and position. Returns whether it changed.
func (r *RoundRobin) Update(endpoints []string) bool {
	if r.sameSet(endpoints) {
		return false
	}
	set := make(map[string]struct{}, len(endpoints))
	var list []string
	for _, e := range endpoints {
		if _, dup := set[e]; dup {
			continue
		}
		set[e] = struct{}{}
		list = append(list, e)
	}
	if len(list) <= smallSet {
		set = nil
	}
	r.rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	r.endpoints, r.set, r.pos = list, set, 0
	return true
}

// sameSet reports whether endpoints, taken as a set, equals the current set.
// Update is not on the hot path, so clarity wins over avoiding the map.
func (r *RoundRobin) sameSet(endpoints []string) bool {
	if len(endpoints) < len(r.endpoints) {
		return false // too few to cover the current set
	}
	seen := make(map[string]struct{}, len(r.endpoints))
	for _, e := range endpoints {
		if !r.Has(e) {
			return false // a new endpoint
		}
		seen[e] = struct{}{}
	}
	return len(seen) == len(r.endpoints) // nothing removed
}

// Next returns the next endpoint not in exclude, advancing the position;
// false when none is left. It does not allocate.
func (r *RoundRobin) Next(exclude []string) (string, bool) {
	n := len(r.endpoints)
	for i := 0; i < n; i++ {
		idx := r.pos + i
		if idx >= n {
			idx -= n
		}
		e := r.endpoints[idx]
		if len(exclude) > 0 && contains(exclude, e) {
			continue
		}
		r.pos = idx + 1
		if r.pos == n {
			r.pos = 0
		}
		return e, true
	}
	return "", false
}

// Endpoints returns a copy of the endpoints in their current order.
func (r *RoundRobin) Endpoints() []string {
	out := make([]string, len(r.endpoints))
	copy(out, r.endpoints)
	return out
}

// Has reports whether endpoint is in the current set, in O(1) (a scan of
// at most smallSet endpoints).
func (r *RoundRobin) Has(endpoint string) bool {
	if r.set == nil {
		return contains(r.endpoints, endpoint)
	}
	_, ok := r.set[endpoint]
	return ok
}

// Len returns the number of distinct endpoints.
func (r *RoundRobin) Len() int { return len(r.endpoints) }
