package main

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal"
)

// releaseAfterFloods hands memory back to the kernel once a flood of
// connections or flows has drained, or a wave of listeners woken at once
// (a probe of every port) has parked again: their goroutine stacks were
// heap pages. Go's runtime would keep it until a periodic GC (every
// 2 min) and its scavenger get to it, and keeps free pages up to its next
// heap goal (twice the live heap); a node agent should not hold on to a
// flood's worth of memory.
func releaseAfterFloods(ctx context.Context, l *portal.Limits, log zerolog.Logger) {
	if l == nil {
		return
	}
	const every, drained = 5 * time.Second, 1000
	go func() {
		var high int64
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			conns, flows, _, _ := l.Counts()
			now := conns + flows + portal.RunningLoops()
			high = max(high, now)
			if high-now >= drained && now <= high/2 {
				debug.FreeOSMemory()
				log.Info().Int64("held", now).Int64("peak", high).Msg("flood drained: memory returned to the kernel")
				high = now
			}
		}
	}()
}

// startGCPercent is the garbage collector's target while the first state
// loads. Decoding thousands of manifests makes garbage at a pace that had
// the collector run a dozen cycles, with the default 100, while the heap
// grew to its size (a sixth of the CPU of starting 10,000 service ports);
// at 200 it runs about half as many. releaseAfterStart restores the
// default, then returns the garbage to the kernel.
const startGCPercent = 200

// startGCBound is how long the start's GC target holds at most, should
// the first state never complete (a source that never syncs).
const startGCBound = time.Minute

// loosenGCForStart sets the collector's target for the start, unless the
// user chose one (GOGC), and returns what restores it: once, at the
// first of its calls or startGCBound.
func loosenGCForStart() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	prev := debug.SetGCPercent(startGCPercent)
	var once sync.Once
	restore = func() { once.Do(func() { debug.SetGCPercent(prev) }) }
	time.AfterFunc(startGCBound, restore)
	return restore
}

// releaseAfterStart hands back to the kernel what loading the first state
// left behind (decoding thousands of manifests makes hundreds of MB of
// garbage that the heap would otherwise keep as its size): once, in the
// background, when every service port of the first state has started.
func releaseAfterStart(servicePorts int, restoreGC func(), log zerolog.Logger) {
	go func() {
		restoreGC()
		debug.FreeOSMemory()
		log.Info().Int("servicePorts", servicePorts).Msg("first state applied: every service port started; memory the load left returned to the kernel")
	}()
}
