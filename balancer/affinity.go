package balancer

import "time"

// DefaultAffinityTimeout is the Kubernetes default for
// sessionAffinityConfig.clientIP.timeoutSeconds (3 hours).
const DefaultAffinityTimeout = 10800 * time.Second

// affinityState is one client's sticky endpoint, like kube-proxy userspace's
// affinityState.
type affinityState struct {
	endpoint string
	lastUsed time.Time
}

// AffinityTable is a ClientIP session-affinity table: it remembers which
// endpoint each client IP last used, for ttl after its last use.
//
// An entry is expired once now - lastUsed >= ttl, i.e. it lives for strictly
// less than ttl after its last use; at exactly ttl it is gone. This matches
// kube-proxy userspace, which hit only while the idle time was < ttl and
// cleaned up when it was >= ttl.
//
// Expiry is always computed from lastUsed and the current ttl, so SetTTL
// affects existing entries too.
//
// An AffinityTable is not safe for concurrent use; it is owned by a single
// actor (see the package doc).
type AffinityTable struct {
	ttl     time.Duration
	now     func() time.Time
	entries map[string]affinityState // client IP -> state
}

// NewAffinityTable returns an empty table. ttl <= 0 means
// DefaultAffinityTimeout; a nil now means time.Now.
func NewAffinityTable(ttl time.Duration, now func() time.Time) *AffinityTable {
	if now == nil {
		now = time.Now
	}
	t := &AffinityTable{now: now, entries: map[string]affinityState{}}
	t.SetTTL(ttl)
	return t
}

// SetTTL changes the timeout; ttl <= 0 means DefaultAffinityTimeout. The new
// timeout applies to existing entries too (expiry is lastUsed + current ttl),
// so shortening it can expire entries at once (on the next Lookup or Sweep).
func (t *AffinityTable) SetTTL(ttl time.Duration) {
	if ttl <= 0 {
		ttl = DefaultAffinityTimeout
	}
	t.ttl = ttl
}

// TTL returns the current timeout.
func (t *AffinityTable) TTL() time.Duration { return t.ttl }

func (t *AffinityTable) expired(s affinityState, now time.Time) bool {
	return now.Sub(s.lastUsed) >= t.ttl
}

// Lookup returns the client's endpoint if it has a live (not expired) entry
// whose endpoint is not in exclude, and refreshes its lastUsed to now. An
// expired entry is deleted and Lookup misses. An entry whose endpoint is in
// exclude is treated as stale (a dial to it failed): it is deleted and Lookup
// misses, so the caller picks a new endpoint and Records it.
func (t *AffinityTable) Lookup(clientIP string, exclude []string) (string, bool) {
	s, ok := t.entries[clientIP]
	if !ok {
		return "", false
	}
	now := t.now()
	if t.expired(s, now) || contains(exclude, s.endpoint) {
		delete(t.entries, clientIP)
		return "", false
	}
	s.lastUsed = now
	t.entries[clientIP] = s
	return s.endpoint, true
}

// Record sets or replaces the client's endpoint, with lastUsed = now.
func (t *AffinityTable) Record(clientIP, endpoint string) {
	t.entries[clientIP] = affinityState{endpoint: endpoint, lastUsed: t.now()}
}

// Retain drops the entries whose endpoint keep rejects (endpoints removed
// from the service) and returns how many were dropped.
func (t *AffinityTable) Retain(keep func(endpoint string) bool) int {
	n := 0
	for ip, s := range t.entries {
		if !keep(s.endpoint) {
			delete(t.entries, ip)
			n++
		}
	}
	return n
}

// Sweep deletes the expired entries and returns how many; it is meant to be
// called from a timer so that idle clients don't accumulate.
func (t *AffinityTable) Sweep() int {
	now := t.now()
	n := 0
	for ip, s := range t.entries {
		if t.expired(s, now) {
			delete(t.entries, ip)
			n++
		}
	}
	return n
}

// Len returns the number of entries, expired ones not yet swept included.
func (t *AffinityTable) Len() int { return len(t.entries) }

// Entries returns a copy of the live entries (client IP -> endpoint), for
// inspection. Expired entries not yet swept are left out; lastUsed is not
// returned. (The table outlives actor restarts in its service port's
// record, so nothing rebuilds it from a copy.)
func (t *AffinityTable) Entries() map[string]string {
	now := t.now()
	out := make(map[string]string, len(t.entries))
	for ip, s := range t.entries {
		if !t.expired(s, now) {
			out[ip] = s.endpoint
		}
	}
	return out
}
