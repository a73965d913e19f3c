package watcher

import (
	"testing"
	"time"
)

// TestFlushesLanes: an unpaced change is flushed at once and every change
// until that flush runs is taken by it; a budget spent by the last
// unpaced flush makes the next wait; paced changes follow
// BoundedFrequency (a burst at once, then one flush per interval), apart
// from the unpaced lane.
func TestFlushesLanes(t *testing.T) {
	var cpu time.Duration
	budget := &CPUBudget{Share: 0.5, clock: func() time.Duration { return cpu }}
	f := NewFlushes(100*time.Millisecond, budget)
	t0 := time.Unix(1000, 0)

	if schedule, after := f.Request(Unpaced, t0); !schedule || after != 0 {
		t.Fatalf("first unpaced change: schedule %v after %v, want at once", schedule, after)
	}
	if schedule, _ := f.Request(Unpaced, t0); schedule {
		t.Fatal("second unpaced change before the flush: scheduled again, want it taken by the arranged flush")
	}
	f.Flushing(Unpaced, t0)
	cpu += 30 * time.Millisecond // the flush cost 30 ms of CPU
	if schedule, after := f.Request(Unpaced, t0.Add(10*time.Millisecond)); !schedule || after != 50*time.Millisecond {
		t.Fatalf("unpaced change 10 ms after a 30 ms flush: schedule %v after %v, want after 50 ms (half a CPU)", schedule, after)
	}

	// The paced lane: DefaultSyncBurst flushes at once, then spaced.
	now := t0
	for i := range DefaultSyncBurst {
		if schedule, after := f.Request(Paced, now); !schedule || after != 0 {
			t.Fatalf("paced change %d of the burst: schedule %v after %v, want at once", i, schedule, after)
		}
		f.Flushing(Paced, now)
	}
	if schedule, after := f.Request(Paced, now); !schedule || after != 100*time.Millisecond {
		t.Fatalf("paced change after the burst: schedule %v after %v, want after the interval", schedule, after)
	}
	if schedule, _ := f.Request(Paced, now.Add(time.Millisecond)); schedule {
		t.Fatal("paced change while one is arranged: scheduled again")
	}
	// A paced flush that found nothing gives its token back.
	f.Flushing(Paced, now.Add(100*time.Millisecond))
	f.Unused(Paced)
	if schedule, after := f.Request(Paced, now.Add(100*time.Millisecond)); !schedule || after != 0 {
		t.Fatalf("after an unused paced flush: schedule %v after %v, want at once", schedule, after)
	}
}
