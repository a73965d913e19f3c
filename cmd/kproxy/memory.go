package main

import (
	"context"
	"runtime/debug"
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

// releaseAfterStart hands back to the kernel what loading the first state
// left behind (decoding thousands of manifests makes hundreds of MB of
// garbage that the heap would otherwise keep as its size): once, in the
// background, when every service port of the first state has started.
func releaseAfterStart(servicePorts int, log zerolog.Logger) {
	go func() {
		debug.FreeOSMemory()
		log.Info().Int("servicePorts", servicePorts).Msg("first state applied: every service port started; memory the load left returned to the kernel")
	}()
}
