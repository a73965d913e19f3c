// Package flushing is the actor side of watcher.Flushes, shared by every
// actor that coalesces changes (the node proxy's Watcher, a core): it
// turns the scheduler's answer into a FlushChanges message to the actor
// itself, sent at once (it comes after the events already in the mailbox,
// so one flush takes them all) or by a timer.
package flushing

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// Request notes a change waiting for lane's flush and arranges that flush
// unless one is arranged already.
func Request(ctx actor.Context, f *watcher.Flushes, lane watcher.Lane) {
	schedule, after := f.Request(lane, time.Now())
	if !schedule {
		return
	}
	m := &messages.FlushChanges{Unpaced: lane == watcher.Unpaced}
	if after <= 0 {
		ctx.Send(ctx.Self(), m)
		return
	}
	scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(after, ctx.Self(), m)
}

// Lane is the lane of a FlushChanges.
func Lane(m *messages.FlushChanges) watcher.Lane {
	if m.GetUnpaced() {
		return watcher.Unpaced
	}
	return watcher.Paced
}
