package watcher

import (
	"math"
	"time"
)

// DefaultSyncBurst is how many flushes may follow one another at once
// before BoundedFrequency spaces them MinInterval apart: kube-proxy's
// iptables proxier ran its BoundedFrequencyRunner with burstSyncs = 2.
const DefaultSyncBurst = 2

// BoundedFrequency decides when coalesced source changes are flushed, with
// the semantics of kube-proxy's BoundedFrequencyRunner: a token bucket
// that refills one token per MinInterval and holds at most Burst. A change
// after a quiet period finds a token and is flushed at once; under
// sustained changes flushes come at most one per MinInterval, and a change
// waits at most MinInterval (the pending flush takes every change made
// before it, so none starves behind later ones).
//
// It is plain logic over the times it is given; the caller owns the timer
// (an actor's scheduler) and calls Changed for every change and Flushing
// for every flush.
type BoundedFrequency struct {
	minInterval time.Duration
	burst       float64
	tokens      float64
	at          time.Time // when tokens was last brought up to date
	pending     bool      // a flush is scheduled and has not run yet
}

// NewBoundedFrequency starts with a full bucket: the first change flushes
// at once. minInterval <= 0 flushes every change at once; burst < 1 is 1.
func NewBoundedFrequency(minInterval time.Duration, burst int) *BoundedFrequency {
	b := float64(max(burst, 1))
	return &BoundedFrequency{minInterval: minInterval, burst: b, tokens: b}
}

// Changed notes a change at now. If no flush is pending, it returns
// schedule true and after, how long from now the caller should flush (0:
// at once); the flush is pending from then until Flushing. Otherwise the
// pending flush will take this change too.
func (b *BoundedFrequency) Changed(now time.Time) (schedule bool, after time.Duration) {
	if b.pending {
		return false, 0
	}
	b.pending = true
	b.refill(now)
	if b.tokens >= 1 || b.minInterval <= 0 {
		return true, 0
	}
	// The time until the bucket holds a whole token again, rounded up so
	// the flush does not come a nanosecond early and find none.
	return true, time.Duration(math.Ceil((1 - b.tokens) * float64(b.minInterval)))
}

// Flushing notes a flush at now, scheduled or not (a full resync flushes
// too): it takes a token and ends the pending flush.
func (b *BoundedFrequency) Flushing(now time.Time) {
	b.pending = false
	b.refill(now)
	b.tokens = max(b.tokens-1, 0)
}

// Unused gives back the token of a flush that found nothing to apply
// (events that changed no service port): the bucket bounds the flushes
// that cost something downstream, and a source's no-op events must not
// delay the next real change.
func (b *BoundedFrequency) Unused() {
	b.tokens = min(b.burst, b.tokens+1)
}

// Pending says whether a flush is scheduled and has not run yet.
func (b *BoundedFrequency) Pending() bool { return b.pending }

func (b *BoundedFrequency) refill(now time.Time) {
	if b.at.IsZero() {
		b.at = now
		return
	}
	if d := now.Sub(b.at); d > 0 && b.minInterval > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)/float64(b.minInterval))
	}
	if now.After(b.at) {
		b.at = now
	}
}
