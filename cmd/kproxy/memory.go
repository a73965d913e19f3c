package main

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
)

// releaseAfterFloods hands memory back to the kernel once a flood of
// connections or flows has drained, or a wave of listeners woken at once
// (a probe of every port) has parked again: their goroutine stacks were
// heap pages. Go's runtime would keep it until a periodic GC (every
// 2 min) and its scavenger get to it, and keeps free pages up to its next
// heap goal (twice the live heap); a node agent should not hold on to a
// flood's worth of memory.
func releaseAfterFloods(ctx context.Context, l *datapath.Limits, log zerolog.Logger) {
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
			now := conns + flows + datapath.RunningLoops()
			high = max(high, now)
			if high-now >= drained && now <= high/2 {
				debug.FreeOSMemory()
				log.Info().Int64("held", now).Int64("peak", high).Msg("flood drained: memory returned to the kernel")
				high = now
			}
		}
	}()
}

// startGCPercent is the collector's target while the first state loads
// (GOGC=400): a start makes garbage far faster than it keeps live data
// (manifests and objects decoded, translated, dropped), so at Go's default
// it collects a dozen times before the last socket opens, on the cores
// the start needs. releaseAfterStart sets the default back and hands the
// grown heap to the kernel.
const startGCPercent = 400

// startGCWait bounds how long startGCPercent holds if no first state is
// ever applied (a source that never syncs).
const startGCWait = time.Minute

// relaxGCForStart sets startGCPercent unless the operator set GOGC, and
// returns what puts the previous target back (once; at the latest after
// startGCWait).
func relaxGCForStart() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	old := debug.SetGCPercent(startGCPercent)
	var once sync.Once
	restore = func() { once.Do(func() { debug.SetGCPercent(old) }) }
	time.AfterFunc(startGCWait, restore)
	return restore
}

// releaseAfterStart sets the collector's target back (restoreGC) and hands
// back to the kernel what loading the first state left behind (decoding
// thousands of manifests makes hundreds of MB of garbage that the heap
// would otherwise keep as its size): once, in the background, when every
// service port of the first state has started.
func releaseAfterStart(servicePorts int, restoreGC func(), log zerolog.Logger) {
	go func() {
		restoreGC()
		debug.FreeOSMemory()
		log.Info().Int("servicePorts", servicePorts).Msg("first state applied: every service port started; memory the load left returned to the kernel")
	}()
}
