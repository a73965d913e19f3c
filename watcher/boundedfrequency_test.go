package watcher

import (
	"testing"
	"time"
)

// bfSim drives a BoundedFrequency as an actor does: a change that gets
// schedule true arranges a flush after the delay; a flush takes every
// change made before it.
type bfSim struct {
	b       *BoundedFrequency
	flushAt time.Time // zero: none scheduled
	waiting []time.Time
	flushes []time.Time
	waits   []time.Duration
}

// advance runs the scheduled flush if it is due by now.
func (s *bfSim) advance(now time.Time) {
	if !s.flushAt.IsZero() && !s.flushAt.After(now) {
		at := s.flushAt
		s.flushAt = time.Time{}
		s.b.Flushing(at)
		s.flushes = append(s.flushes, at)
		for _, c := range s.waiting {
			s.waits = append(s.waits, at.Sub(c))
		}
		s.waiting = nil
	}
}

func (s *bfSim) change(now time.Time) {
	s.advance(now)
	s.waiting = append(s.waiting, now)
	if schedule, after := s.b.Changed(now); schedule {
		s.flushAt = now.Add(after)
	}
	s.advance(now)
}

var bfEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBoundedFrequencyIdleChangeFlushesAtOnce(t *testing.T) {
	b := NewBoundedFrequency(100*time.Millisecond, 1)
	if schedule, after := b.Changed(bfEpoch); !schedule || after != 0 {
		t.Fatalf("first change: schedule %v after %v, want a flush at once", schedule, after)
	}
	if schedule, _ := b.Changed(bfEpoch.Add(time.Millisecond)); schedule {
		t.Fatal("a change while a flush is pending scheduled another")
	}
	b.Flushing(bfEpoch.Add(time.Millisecond))
	// Within the interval: coalesced until a token is back.
	if schedule, after := b.Changed(bfEpoch.Add(31 * time.Millisecond)); !schedule || after != 70*time.Millisecond {
		t.Fatalf("change 30 ms after a flush: schedule %v after %v, want 70ms", schedule, after)
	}
	b.Flushing(bfEpoch.Add(101 * time.Millisecond))
	// A quiet period refills the bucket: at once again.
	if schedule, after := b.Changed(bfEpoch.Add(250 * time.Millisecond)); !schedule || after != 0 {
		t.Fatalf("change after a quiet period: schedule %v after %v, want a flush at once", schedule, after)
	}
}

func TestBoundedFrequencyBurst(t *testing.T) {
	s := &bfSim{b: NewBoundedFrequency(100*time.Millisecond, 2)}
	for _, ms := range []int{0, 5, 10} {
		s.change(bfEpoch.Add(time.Duration(ms) * time.Millisecond))
	}
	s.advance(bfEpoch.Add(time.Second))
	want := []time.Duration{0, 5 * time.Millisecond, 100 * time.Millisecond}
	if len(s.flushes) != len(want) {
		t.Fatalf("flushes at %v, want 3", s.flushes)
	}
	for i, w := range want {
		if got := s.flushes[i].Sub(bfEpoch); got != w {
			t.Errorf("flush %d at %v, want %v (two at once, then one interval after the first)", i, got, w)
		}
	}
}

// Under sustained changes the flushes are spaced MinInterval apart and no
// change waits longer than MinInterval, however long they keep coming.
func TestBoundedFrequencySustainedNeverStarves(t *testing.T) {
	const minInterval = 100 * time.Millisecond
	for _, every := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 37 * time.Millisecond, 99 * time.Millisecond} {
		s := &bfSim{b: NewBoundedFrequency(minInterval, DefaultSyncBurst)}
		const span = 10 * time.Second
		for at := time.Duration(0); at < span; at += every {
			s.change(bfEpoch.Add(at))
		}
		s.advance(bfEpoch.Add(span + time.Second))
		if len(s.waiting) != 0 {
			t.Fatalf("every %v: %d changes never flushed", every, len(s.waiting))
		}
		for i, w := range s.waits {
			if w > minInterval {
				t.Fatalf("every %v: change %d waited %v, more than the min interval %v", every, i, w, minInterval)
			}
		}
		// The bucket's bound: Burst at once, then one per interval.
		if limit := DefaultSyncBurst + int(span/minInterval) + 1; len(s.flushes) > limit {
			t.Errorf("every %v: %d flushes in %v, more than %d", every, len(s.flushes), span, limit)
		}
		for i := DefaultSyncBurst; i < len(s.flushes); i++ {
			if d := s.flushes[i].Sub(s.flushes[i-DefaultSyncBurst]); d < minInterval {
				t.Errorf("every %v: flushes %d and %d only %v apart: more than %d in one interval", every, i-DefaultSyncBurst, i, d, DefaultSyncBurst)
			}
		}
	}
}

func TestBoundedFrequencyZeroIntervalFlushesEveryChange(t *testing.T) {
	b := NewBoundedFrequency(0, 1)
	for i := range 5 {
		now := bfEpoch.Add(time.Duration(i) * time.Microsecond)
		if schedule, after := b.Changed(now); !schedule || after != 0 {
			t.Fatalf("change %d: schedule %v after %v", i, schedule, after)
		}
		b.Flushing(now)
	}
}

// A flush the caller makes on its own (a full resync) takes a token too.
func TestBoundedFrequencyUnscheduledFlushTakesAToken(t *testing.T) {
	b := NewBoundedFrequency(100*time.Millisecond, 1)
	b.Flushing(bfEpoch)
	if schedule, after := b.Changed(bfEpoch.Add(40 * time.Millisecond)); !schedule || after != 60*time.Millisecond {
		t.Fatalf("change 40 ms after a resync: schedule %v after %v, want 60ms", schedule, after)
	}
}

// A flush that applied nothing gives its token back: no-op events do not
// hold the next real change.
func TestBoundedFrequencyUnusedFlushGivesItsTokenBack(t *testing.T) {
	b := NewBoundedFrequency(time.Hour, 1)
	for i := range 3 {
		now := bfEpoch.Add(time.Duration(i) * time.Second)
		if schedule, after := b.Changed(now); !schedule || after != 0 {
			t.Fatalf("no-op change %d: schedule %v after %v, want at once", i, schedule, after)
		}
		b.Flushing(now)
		b.Unused()
	}
	b.Changed(bfEpoch.Add(10 * time.Second))
	b.Flushing(bfEpoch.Add(10 * time.Second))
	if _, after := b.Changed(bfEpoch.Add(11 * time.Second)); after == 0 {
		t.Fatal("a second real change within the interval with a burst of 1 was not held")
	}
}
