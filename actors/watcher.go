package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// Watcher turns source events into per-service-port changes for the
// Proxier, sending only what really changed, so an unchanged service port
// is never touched. Every source (Kubernetes informers, the file source)
// is incremental: it sends ServiceChanged events and its View builds a
// service on demand. The Watcher coalesces events for Config.MinSyncPeriod
// (many events for one service in a window become one rebuild) and lets
// its watcher.Tracker rebuild only the services that changed.
type Watcher struct {
	cfg     *Config
	proxier *actor.PID
	tracker *watcher.Tracker
	synced  bool
	armed   bool
	// generation counts the flushes that changed something.
	generation int64
}

func newWatcher(cfg *Config, proxier *actor.PID) actor.Producer {
	return func() actor.Actor {
		return &Watcher{cfg: cfg, proxier: proxier, tracker: watcher.NewTracker(cfg.View)}
	}
}

// Receive implements actor.Actor.
func (w *Watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Restarting:
		// The new incarnation starts from an empty tracker: rebuild everything.
		ctx.Send(ctx.Self(), &messages.SourceSynced{})
	case *messages.ServiceChanged:
		w.cfg.Health.QueuedUpdate(healthStageSource)
		w.tracker.Mark(m.GetService())
		w.arm(ctx)
	case *messages.SourceSynced:
		w.synced = true
		w.tracker.Mark("")
		w.flush(ctx)
	case *messages.FlushChanges:
		w.armed = false
		w.flush(ctx)
	case *messages.GetWatcherStats:
		ctx.Respond(&messages.WatcherStats{Flushes: w.generation, Events: w.tracker.Events, Changes: w.tracker.Changes})
	}
}

// arm starts a coalescing window unless one is open or the source is not
// synced yet (nothing is programmed before).
func (w *Watcher) arm(ctx actor.Context) {
	if w.synced && !w.armed {
		w.armed = true
		scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(w.cfg.MinSyncPeriod, ctx.Self(), &messages.FlushChanges{})
	}
}

// healthStageSource is the Watcher's stage in Config.Health: source
// changes are queued until a flush hands them to the Proxier.
const healthStageSource = "source"

// flush sends the tracker's changes to the Proxier.
func (w *Watcher) flush(ctx actor.Context) {
	defer w.cfg.Health.Updated(healthStageSource)
	if !w.tracker.Pending() {
		return
	}
	ch := w.tracker.Flush()
	for _, err := range ch.Errors {
		w.cfg.Log.Warn().Err(err).Msg("service rejected; its previous state is kept")
	}
	if len(ch.Upserts) == 0 && len(ch.Deletes) == 0 {
		return
	}
	w.generation++
	for _, spe := range ch.Upserts {
		ctx.Send(w.proxier, &messages.UpsertServicePort{ServicePort: spe.GetServicePort(), Endpoints: spe.GetEndpoints(), Generation: w.generation})
	}
	for _, k := range ch.Deletes {
		ctx.Send(w.proxier, &messages.DeleteServicePort{Key: k, Generation: w.generation})
	}
	w.cfg.Log.Debug().Int64("generation", w.generation).Int("upserts", len(ch.Upserts)).Int("deletes", len(ch.Deletes)).
		Int64("events", w.tracker.Events).Int64("changes", w.tracker.Changes).Msg("source changes applied")
}
