package remote

import (
	"testing"
	"time"
)

// TestFlushBudget: nothing waits before a first flush; after one, a flush
// waits until the CPU used since it started is at most coreFlushShare of
// the time since, and never longer than maxFlushWait.
func TestFlushBudget(t *testing.T) {
	var cpu time.Duration
	b := flushBudget{clock: func() time.Duration { return cpu }}
	t0 := time.Unix(1000, 0)
	if w := b.wait(t0); w != 0 {
		t.Fatalf("before any flush: wait %v, want 0", w)
	}
	cpu = 5 * time.Second
	b.started(t0)
	cpu += 20 * time.Millisecond // the flush and its acknowledgements
	if w, want := b.wait(t0.Add(10*time.Millisecond)), time.Duration(float64(20*time.Millisecond)/coreFlushShare)-10*time.Millisecond; w != want {
		t.Errorf("20 ms of CPU, 10 ms later: wait %v, want %v", w, want)
	}
	if w := b.wait(t0.Add(time.Second)); w > 0 {
		t.Errorf("20 ms of CPU, 1 s later: wait %v, want none", w)
	}
	cpu += time.Minute // a busy process
	if w := b.wait(t0.Add(10 * time.Millisecond)); w != maxFlushWait {
		t.Errorf("a minute of CPU: wait %v, want the cap %v", w, maxFlushWait)
	}
}
