package remote

import "time"

// subscribeQueue holds the Subscribes a core cannot serve yet because
// MaxSnapshotsInFlight snapshots wait for their acknowledgement: a core
// that starts (or a replica that takes over) with thousands of nodes
// subscribing at once would otherwise send every snapshot together, none
// acknowledged within the lease, and drop and re-send them all. Served in
// the order they came; a backend asking again keeps its place.
type subscribeQueue struct {
	order []queuedKey
	byKey map[string]queuedSubscribe
	next  uint64
}

type queuedSubscribe struct {
	heldSubscribe
	asked time.Time // last asked: a backend gone stops asking
	place uint64
}

// queuedKey is a place in the order; one whose key left the queue (or
// left and came back behind) is skipped.
type queuedKey struct {
	key   string
	place uint64
}

func newSubscribeQueue() *subscribeQueue {
	return &subscribeQueue{byKey: map[string]queuedSubscribe{}}
}

// put queues h for the subscriber key, or refreshes its Subscribe in its
// place.
func (q *subscribeQueue) put(key string, h heldSubscribe, now time.Time) {
	place := q.next
	if old, ok := q.byKey[key]; ok {
		place = old.place
	} else {
		q.next++
		q.order = append(q.order, queuedKey{key: key, place: place})
	}
	q.byKey[key] = queuedSubscribe{heldSubscribe: h, asked: now, place: place}
}

// pop takes the Subscribe that waited longest.
func (q *subscribeQueue) pop() (heldSubscribe, bool) {
	for len(q.order) > 0 {
		at := q.order[0]
		q.order = q.order[1:]
		if h, ok := q.byKey[at.key]; ok && h.place == at.place {
			delete(q.byKey, at.key)
			return h.heldSubscribe, true
		}
	}
	q.order = nil // let the backing array go
	return heldSubscribe{}, false
}

// remove takes key out of the queue, if there.
func (q *subscribeQueue) remove(key string) { delete(q.byKey, key) }

// expire drops the Subscribes last asked before: their backends stopped
// asking (gone, or subscribed elsewhere). It says how many.
func (q *subscribeQueue) expire(before time.Time) int {
	n := 0
	for key, h := range q.byKey {
		if h.asked.Before(before) {
			delete(q.byKey, key)
			n++
		}
	}
	return n
}

func (q *subscribeQueue) len() int { return len(q.byKey) }
