package balancer

import (
	"slices"
	"sort"
	"time"
)

// OutlierConfig is outlier detection's tuning, after Envoy's
// consecutive_local_origin_failure, base_ejection_time and
// max_ejection_time.
type OutlierConfig struct {
	// ConsecutiveFailures is how many dials in a row must fail (refused,
	// unreachable; timed out once the endpoint is stalled, see StallAfter)
	// to eject an endpoint; 0 turns detection off.
	ConsecutiveFailures int
	// BaseEjection is the first ejection's length; each further ejection
	// without a success between doubles it, up to MaxEjection.
	BaseEjection time.Duration
	MaxEjection  time.Duration
}

// DefaultOutlierConfig ejects after 3 failed dials (at most 3 × the first
// 250 ms dial timeout lost to a stalled endpoint), for 2 s, then 4 s, ...
// up to a minute: a pod that comes back is used again within a minute,
// and a dead one costs one probe per ejection.
var DefaultOutlierConfig = OutlierConfig{ConsecutiveFailures: 3, BaseEjection: 2 * time.Second, MaxEjection: time.Minute}

// StallAfter is how long an endpoint's dials may time out, with no
// success between, before a timeout counts as a failure. A SYN the
// endpoint's kernel dropped because its accept queue was full is
// retransmitted by the client's kernel after 1 s and 3 s (an initial RTO
// of 1 s, TCP_TIMEOUT_INIT, doubling): until both retransmissions went
// unanswered, a timed-out dial says the endpoint is busy, not dead. A
// blackholed endpoint (a node gone without a trace) only ever times out,
// and is ejected after this.
const StallAfter = 3 * time.Second

// panicThreshold is Envoy's healthy panic threshold, in percent: when
// fewer of a pool's endpoints than this are un-ejected, ejections are
// ignored there, so the last endpoints are never ejected and the few left
// are not overloaded by detection that may be wrong.
const panicThreshold = 50

// Outliers tracks endpoints ("ip:port") whose dials fail, as Envoy's outlier
// detection does for local-origin failures: after ConsecutiveFailures
// failed dials in a row an endpoint is ejected (skipped by picks). When its
// ejection time is up, the owner probes it with a dial of its own, so no
// client pays for a dead endpoint twice: a success restores it, a failure
// ejects it again for twice as long, up to MaxEjection.
//
// Only endpoints with recent failures have a record, so the healthy path
// looks up an empty map. Not safe for concurrent use: the Balancer actor
// owns it. Times are passed in, so tests need no clock.
type Outliers struct {
	cfg   OutlierConfig
	hosts map[string]*outlier
}

type outlier struct {
	failures  int       // consecutive failed dials since the last success or ejection
	ejections int       // ejections since the last success
	until     time.Time // when the ejection is up and a probe is due
	// slowSince is when the first dial timed out since the last success
	// (zero: none did).
	slowSince time.Time
	lastError string // the last failed dial's error, for the operator
}

// Ejection is an ejected endpoint, for state.
type Ejection struct {
	Endpoint string
	// Until is when the ejection is up: the endpoint is probed then, and
	// stays ejected until a probe succeeds.
	Until time.Time
	// Ejections counts ejections since the endpoint's last successful dial.
	Ejections int
	// LastError is the last failed dial's error (see Explain).
	LastError string
}

// NewOutliers returns an empty tracker.
func NewOutliers(cfg OutlierConfig) *Outliers {
	return &Outliers{cfg: cfg, hosts: map[string]*outlier{}}
}

// Watched reports whether the outcome of a dial to endpoint is wanted: only
// failures are always reported; a success matters only for an endpoint
// with a record.
func (o *Outliers) Watched(endpoint string) bool {
	_, ok := o.hosts[endpoint]
	return ok
}

// Watching reports whether any endpoint has a record.
func (o *Outliers) Watching() bool { return len(o.hosts) > 0 }

// Failed records a failed dial, a client's or a probe's. It returns how
// long the endpoint is now ejected for (probe it then), or 0 when this
// failure did not eject it. Once ejected, a failure before the ejection
// is up (of a dial picked earlier, still arriving) changes nothing; one
// after it (a probe's) ejects it again.
func (o *Outliers) Failed(endpoint string, now time.Time) time.Duration {
	if o.cfg.ConsecutiveFailures <= 0 {
		return 0
	}
	return o.failed(o.record(endpoint), now)
}

// TimedOut records a dial that timed out, a client's or a probe's. It
// counts as a failure (see Failed) only once the endpoint has answered no
// dial for StallAfter, or while it is ejected (a probe's): before that the
// endpoint may only have a full accept queue, and a client's later dials
// reach it. It still starts a record, so the next success is reported and
// ends the slow spell.
func (o *Outliers) TimedOut(endpoint string, now time.Time) time.Duration {
	if o.cfg.ConsecutiveFailures <= 0 {
		return 0
	}
	h := o.record(endpoint)
	if h.ejections == 0 {
		if h.slowSince.IsZero() {
			h.slowSince = now
		}
		if now.Sub(h.slowSince) < StallAfter {
			return 0
		}
	}
	return o.failed(h, now)
}

// Explain records why endpoint's last dial failed, shown with its
// ejection: a refusal, an unreachable host and a timeout call for
// different fixes. It does nothing for an endpoint without a record.
func (o *Outliers) Explain(endpoint, err string) {
	if h := o.hosts[endpoint]; h != nil {
		h.lastError = err
	}
}

func (o *Outliers) record(endpoint string) *outlier {
	h := o.hosts[endpoint]
	if h == nil {
		h = &outlier{}
		o.hosts[endpoint] = h
	}
	return h
}

// failed counts a failure of h's endpoint and returns the ejection it
// causes, if any.
func (o *Outliers) failed(h *outlier, now time.Time) time.Duration {
	if now.Before(h.until) {
		return 0 // already ejected
	}
	h.failures++
	if h.ejections == 0 && h.failures < o.cfg.ConsecutiveFailures {
		return 0
	}
	h.ejections++
	d := o.cfg.BaseEjection << min(h.ejections-1, 30)
	if d <= 0 || d > o.cfg.MaxEjection {
		d = o.cfg.MaxEjection
	}
	h.until, h.failures = now.Add(d), 0
	return d
}

// Succeeded records a successful dial and reports whether the endpoint had
// been ejected (and is now restored).
func (o *Outliers) Succeeded(endpoint string) bool {
	h, ok := o.hosts[endpoint]
	delete(o.hosts, endpoint)
	return ok && h.ejections > 0
}

// Ejected reports whether endpoint is ejected.
func (o *Outliers) Ejected(endpoint string) bool {
	h := o.hosts[endpoint]
	return h != nil && h.ejections > 0
}

// Skip returns exclude plus the ejected endpoints of members. When that
// would leave fewer than panicThreshold percent of members, it returns
// exclude alone. It returns exclude itself when nothing is skipped, so the
// healthy path does not allocate.
func (o *Outliers) Skip(members, exclude []string) []string {
	if len(o.hosts) == 0 {
		return exclude
	}
	skip := exclude
	n := 0
	for _, m := range members {
		if o.Ejected(m) {
			if n == 0 {
				skip = slices.Clip(exclude) // append must not write into the caller's array
			}
			skip = append(skip, m)
			n++
		}
	}
	if n == 0 || 100*(len(members)-n) < panicThreshold*len(members) {
		return exclude
	}
	return skip
}

// Retain forgets endpoints not in endpoints (removed from the service).
// It reports whether an ejected one was forgotten.
func (o *Outliers) Retain(endpoints []string) bool {
	changed := false
	for e, h := range o.hosts {
		if !slices.Contains(endpoints, e) {
			changed = changed || h.ejections > 0
			delete(o.hosts, e)
		}
	}
	return changed
}

// Ejections lists the ejected endpoints, by endpoint.
func (o *Outliers) Ejections() []Ejection {
	var out []Ejection
	for e, h := range o.hosts {
		if h.ejections > 0 {
			out = append(out, Ejection{Endpoint: e, Until: h.until, Ejections: h.ejections, LastError: h.lastError})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}
