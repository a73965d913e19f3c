package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// Watcher turns source events into per-service-port changes for the
// Proxier, sending only what really changed, so an unchanged service port
// is never touched. Every source (Kubernetes informers, the file source)
// is incremental: it sends ServiceChanged events and its View builds a
// service on demand. The Watcher flushes a change at once when it has been
// quiet and coalesces only under sustained changes, at most one flush per
// Config.MinSyncPeriod after a burst (watcher.BoundedFrequency, kube-proxy's
// BoundedFrequencyRunner); many events for one service before a flush
// become one rebuild, and its watcher.Tracker rebuilds only the services
// that changed.
type Watcher struct {
	cfg     *Config
	proxier *actor.PID
	*tracked
	pace *watcher.BoundedFrequency
	// traced is, per service, the trace of the first source event of
	// the open coalescing window (tracing only).
	traced map[string]*pendingTrace
}

// tracked is the Watcher's state that outlives its incarnations, so
// generations go on and programming latency is observed once per trigger.
// A restarted Watcher rebuilds every service from the source's view: a
// panic may have left the tracker half-way.
type tracked struct {
	tracker *watcher.Tracker
	synced  bool
	// generation counts the flushes that changed something.
	generation int64
	// triggers is, per service, the last EndpointSlice trigger time
	// observed for kubeproxy_network_programming_duration_seconds, so
	// each is observed once.
	triggers map[string]time.Time
	// applied is set once the first flush is followed by FlushApplied.
	applied bool
	started bool
}

func newWatcher(cfg *Config, proxier *actor.PID) *actor.Props {
	st := &tracked{tracker: watcher.NewTracker(cfg.View), triggers: map[string]time.Time{}}
	period := cfg.MinSyncPeriod
	if cfg.SourcePaced {
		period = 0 // flushes follow the source's own pacing
	}
	return cfg.propsFor(func() actor.Actor {
		return &Watcher{cfg: cfg, proxier: proxier, tracked: st, pace: watcher.NewBoundedFrequency(period, watcher.DefaultSyncBurst)}
	})
}

// Receive implements actor.Actor.
func (w *Watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		w.cfg.traceRestart(ctx)
		if w.started && w.synced {
			ctx.Send(ctx.Self(), &messages.SourceSynced{}) // restarted: rebuild everything
		}
		w.started = true
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.ServiceChanged:
		w.cfg.Health.QueuedUpdate(healthStageSource)
		w.cfg.Metrics.Queued(m.GetKind())
		w.tracker.Mark(m.GetService())
		w.trace(m)
		w.arm(ctx)
	case *messages.SourceSynced:
		w.synced = true
		w.tracker.Mark("")
		w.flush(ctx)
		if !w.applied {
			w.applied = true
			ctx.Send(w.proxier, &messages.FlushApplied{Generation: w.generation})
		}
	case *messages.FlushChanges:
		w.pace.Flushing(time.Now())
		if !w.flush(ctx) {
			w.pace.Unused()
		}
	case *messages.GetWatcherStats:
		ctx.Respond(&messages.WatcherStats{Flushes: w.generation, Events: w.tracker.Events, Changes: w.tracker.Changes})
	}
}

// arm schedules a flush unless one is pending or the source is not synced
// yet (nothing is programmed before). A flush due at once is a message to
// itself, so it comes after the events already in the mailbox and takes
// them all.
func (w *Watcher) arm(ctx actor.Context) {
	if !w.synced {
		return
	}
	schedule, after := w.pace.Changed(time.Now())
	switch {
	case !schedule:
	case after <= 0:
		ctx.Send(ctx.Self(), &messages.FlushChanges{})
	default:
		scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(after, ctx.Self(), &messages.FlushChanges{})
	}
}

// healthStageSource is the Watcher's stage in Config.Health: source
// changes are queued until a flush hands them to the Proxier.
const healthStageSource = "source"

// flush sends the tracker's changes to the Proxier and says whether there
// were any.
func (w *Watcher) flush(ctx actor.Context) bool {
	start := time.Now()
	defer w.cfg.Health.Updated(healthStageSource)
	defer w.cfg.Metrics.Flushed()
	if !w.tracker.Pending() {
		return false
	}
	ch := w.tracker.Flush()
	traces := w.flushTraces(ch)
	for _, err := range ch.Errors {
		w.cfg.Log.Warn().Err(err).Msg("service rejected; its previous state is kept")
	}
	if len(ch.Upserts) == 0 && len(ch.Deletes) == 0 {
		return false
	}
	w.generation++
	for _, spe := range ch.Upserts {
		ctx.Send(w.proxier, &messages.UpsertServicePort{ServicePort: spe.GetServicePort(), Endpoints: spe.GetEndpoints(), Generation: w.generation,
			Trace: traces.context(spe.GetServicePort().GetKey())})
	}
	for _, k := range ch.Deletes {
		ctx.Send(w.proxier, &messages.DeleteServicePort{Key: k, Generation: w.generation, Trace: traces.context(k)})
	}
	traces.end(w.generation)
	if w.cfg.Rules == nil {
		w.cfg.Metrics.Synced(false, time.Since(start)) // bind mode: nothing more to program
	}
	w.observeTriggers(ch)
	w.cfg.Log.Debug().Int64("generation", w.generation).Int("upserts", len(ch.Upserts)).Int("deletes", len(ch.Deletes)).
		Int64("events", w.tracker.Events).Int64("changes", w.tracker.Changes).Msg("source changes applied")
	return true
}

// triggerTimer is a View that knows when a service's endpoints last
// changed at the source (EndpointSlices' last-change-trigger-time).
type triggerTimer interface {
	TriggerTime(service string) time.Time
}

// observeTriggers records, once per trigger time, how long the changed
// services took from their trigger to this flush.
func (w *Watcher) observeTriggers(ch watcher.Changes) {
	tt, ok := w.cfg.View.(triggerTimer)
	if !ok || w.cfg.Metrics == nil {
		return
	}
	services := map[string]bool{}
	for _, spe := range ch.Upserts {
		k := spe.GetServicePort().GetKey()
		services[k.GetNamespace()+"/"+k.GetName()] = true
	}
	for _, k := range ch.Deletes {
		delete(w.triggers, k.GetNamespace()+"/"+k.GetName())
	}
	for svc := range services {
		t := tt.TriggerTime(svc)
		if t.After(w.triggers[svc]) {
			w.triggers[svc] = t
			w.cfg.Metrics.NetworkProgrammed(t)
		}
	}
}
