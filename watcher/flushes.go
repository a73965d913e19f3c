package watcher

import "time"

// Lane is which of a Flushes's two flushes a change waits for.
type Lane uint8

const (
	// Unpaced changes program no kernel rule and open no listener (a
	// service's endpoints only): flushed at once, behind the events
	// already queued, unless a CPU budget says the last flush cost too
	// much to go again yet.
	Unpaced Lane = iota
	// Paced changes (a service port added, removed or redefined) are
	// flushed as kube-proxy's minSyncPeriod paces rule programming
	// (BoundedFrequency).
	Paced
)

// Flushes decides when a holder of coalesced changes flushes them: the
// node proxy's Watcher, a core, kproxy watch. It is plain logic over the
// times it is given; the caller owns the timers (an actor's message to
// itself or its scheduler, a loop's time.After). The caller calls Request
// for a change, arranges a flush of that lane when told to, and calls
// Flushing when the flush runs and Unused when it found nothing.
type Flushes struct {
	pace   *BoundedFrequency
	budget *CPUBudget // nil: an unpaced flush never waits
	// unpaced: an unpaced flush is arranged and has not run yet.
	unpaced bool
}

// NewFlushes paces changes at minInterval (<= 0: every change at once)
// after a burst of DefaultSyncBurst, and spaces unpaced flushes by budget
// (nil: not at all).
func NewFlushes(minInterval time.Duration, budget *CPUBudget) *Flushes {
	return &Flushes{pace: NewBoundedFrequency(minInterval, DefaultSyncBurst), budget: budget}
}

// Request notes a change waiting for lane's flush at now. schedule says
// the caller must arrange that flush after (0: at once, behind what is
// already queued, so one flush takes every change before it); false: one
// is arranged and will take this change too.
func (f *Flushes) Request(lane Lane, now time.Time) (schedule bool, after time.Duration) {
	if lane == Paced {
		return f.pace.Changed(now)
	}
	if f.unpaced {
		return false, 0
	}
	f.unpaced = true
	if f.budget != nil {
		return true, max(f.budget.Wait(now), 0)
	}
	return true, 0
}

// Flushing notes lane's flush running at now, arranged or not (a full
// resync flushes too).
func (f *Flushes) Flushing(lane Lane, now time.Time) {
	if lane == Paced {
		f.pace.Flushing(now)
		return
	}
	f.unpaced = false
	if f.budget != nil {
		f.budget.Started(now)
	}
}

// Unused notes that lane's flush found nothing to apply: a paced one gives
// its token back, so a source's no-op events do not delay the next real
// change.
func (f *Flushes) Unused(lane Lane) {
	if lane == Paced {
		f.pace.Unused()
	}
}
