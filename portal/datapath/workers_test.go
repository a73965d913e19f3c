package datapath

import (
	"testing"
	"time"
)

func (wp *workerPool) idleCount() (n int, sweeping bool) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	return len(wp.idle), wp.sweeping
}

func awaitIdle(t *testing.T, wp *workerPool, want int, sweeping bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, s := wp.idleCount()
		if n == want && s == sweeping {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle goroutines, sweeping %v; want %d, %v", n, s, want, sweeping)
		}
		time.Sleep(time.Millisecond)
	}
}

// A goroutine that ended its task takes the next one; idle ones are ended
// by the sweep, which ends itself once none is left; at most maxIdle wait.
func TestWorkerPoolReusesBoundsAndSweeps(t *testing.T) {
	wp := &workerPool{maxIdle: 2, idleFor: 20 * time.Millisecond}
	done := make(chan struct{})
	wp.Go(task{fn: func() { done <- struct{}{} }})
	<-done
	awaitIdle(t, wp, 1, true)
	wp.Go(task{fn: func() { done <- struct{}{} }})
	if n, _ := wp.idleCount(); n != 0 {
		t.Fatalf("%d idle goroutines after a task was given: the idle one should have taken it", n)
	}
	<-done
	awaitIdle(t, wp, 0, false) // swept after idleFor

	release := make(chan struct{})
	for range 4 {
		wp.Go(task{fn: func() { <-release }})
	}
	close(release)
	awaitIdle(t, wp, 2, true)
	awaitIdle(t, wp, 0, false)
}

// A task that panics ends alone: the next task runs.
func TestWorkerPoolPanicEndsOnlyItsTask(t *testing.T) {
	wp := &workerPool{maxIdle: 2, idleFor: 20 * time.Millisecond}
	wp.Go(task{fn: func() { panic("one connection's bug") }})
	done := make(chan struct{})
	wp.Go(task{fn: func() { close(done) }})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the task after a panicking one did not run")
	}
	awaitIdle(t, wp, 0, false)
}
