package watcher

import (
	"testing"
	"time"
)

// TestCPUBudget: nothing waits before a first flush; after one, a flush
// waits until the CPU used since it started is at most Share of the time
// since, and never longer than maxBudgetWait.
func TestCPUBudget(t *testing.T) {
	var cpu time.Duration
	b := CPUBudget{Share: 0.5, clock: func() time.Duration { return cpu }}
	t0 := time.Unix(1000, 0)
	if w := b.Wait(t0); w != 0 {
		t.Fatalf("before any flush: wait %v, want 0", w)
	}
	cpu = 5 * time.Second
	b.Started(t0)
	cpu += 20 * time.Millisecond // the flush and what came back
	if w, want := b.Wait(t0.Add(10*time.Millisecond)), time.Duration(float64(20*time.Millisecond)/b.Share)-10*time.Millisecond; w != want {
		t.Errorf("20 ms of CPU, 10 ms later: wait %v, want %v", w, want)
	}
	if w := b.Wait(t0.Add(time.Second)); w > 0 {
		t.Errorf("20 ms of CPU, 1 s later: wait %v, want none", w)
	}
	cpu += time.Minute // a busy process
	if w := b.Wait(t0.Add(10 * time.Millisecond)); w != maxBudgetWait {
		t.Errorf("a minute of CPU: wait %v, want the cap %v", w, maxBudgetWait)
	}
}
