package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/actors/flushing"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// Watcher turns source events into per-service-port changes for the
// Proxier, sending only what really changed, so an unchanged service port
// is never touched. Every source (Kubernetes informers, the file source)
// is incremental: it sends events (SourceEvent), which the Watcher queues
// until its next flush; the flush hands them to the Tracker, which applies
// them to the source's View (the Kubernetes source's carry the objects)
// and has the View build each changed service once. A change of only a
// service's endpoints programs no kernel rule and opens no listener, so it
// is applied at once, with every event already queued behind it
// (watcher.Tracker.FlushUnpaced). Any other change (a service port added,
// removed or redefined) is paced as kube-proxy's minSyncPeriod paces rule
// programming: applied at once when the Watcher has been quiet, at most
// one flush per Config.MinSyncPeriod after a burst under sustained
// changes (kube-proxy's BoundedFrequencyRunner). watcher.Flushes decides
// when, as it does for a core and kproxy watch. Its watcher.Tracker rebuilds only the services that changed.
type Watcher struct {
	cfg     *Config
	proxier *actor.PID
	*tracked
	pacing *watcher.Flushes
	// period paces the changes that need it; 0 when the source paces them.
	period time.Duration
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
	// queued are the source's events since the last flush, in order.
	queued []watcher.Event
	synced bool
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
		return &Watcher{cfg: cfg, proxier: proxier, tracked: st, period: period, pacing: watcher.NewFlushes(period, nil)}
	})
}

// SourceEvent is a source's event on its way to the Watcher. It is a Go
// value, not a protobuf message: it carries the Kubernetes object itself,
// and never leaves the process.
type SourceEvent struct {
	watcher.Event
	// Trace is the event's span, the root of its change's trace (nil
	// with tracing off).
	Trace *messages.TraceContext
}

// SourceEvent hands a source's event to the Watcher; a source's notify
// calls only this.
func (p *Proxy) SourceEvent(e watcher.Event) {
	msg := &SourceEvent{Event: e}
	if p.cfg.Tracer != nil && e.Service != "" {
		span, tc := p.cfg.rootSpan(spanSourceEvent, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrService.String(e.Service), attribute.String("kproxy.kind", e.Kind.String())))
		span.End()
		msg.Trace = tc
	}
	p.System.Root.Send(p.Watcher, msg)
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
	case *SourceEvent:
		w.cfg.Health.QueuedUpdate(healthStageSource)
		w.cfg.Metrics.Queued(m.Kind.String())
		w.queued = append(w.queued, m.Event)
		w.trace(m)
		w.request(ctx, watcher.Unpaced)
	case *messages.SourceSynced:
		w.synced = true
		w.tracker.Mark("")
		w.flush(ctx)
		if !w.applied {
			w.applied = true
			ctx.Send(w.proxier, &messages.FlushApplied{Generation: w.generation})
		}
	case *messages.FlushChanges:
		w.flushDue(ctx, flushing.Lane(m))
	case *messages.GetWatcherStats:
		ctx.Respond(&messages.WatcherStats{Flushes: w.generation, Events: w.tracker.Events, Changes: w.tracker.Changes})
	}
}

// request arranges lane's flush, unless the source is not synced yet
// (nothing is programmed before).
func (w *Watcher) request(ctx actor.Context, lane watcher.Lane) {
	if w.synced {
		flushing.Request(ctx, w.pacing, lane)
	}
}

// flushDue runs lane's flush: the unpaced one applies what needs no
// pacing and leaves the rest to the paced one; with nothing paced (the
// source paces) one flush takes all.
func (w *Watcher) flushDue(ctx actor.Context, lane watcher.Lane) {
	now := time.Now()
	w.handleQueued()
	w.pacing.Flushing(lane, now)
	if lane == watcher.Unpaced && w.period > 0 {
		ch, held := w.tracker.FlushUnpaced()
		w.apply(ctx, ch, now)
		if held {
			w.request(ctx, watcher.Paced)
		}
		return
	}
	if !w.flush(ctx) {
		w.pacing.Unused(lane)
	}
}

// handleQueued hands the queued events to the Tracker, in order. Each is
// taken off the queue before it is handled: an event whose handling
// panics is not handled again, and the next incarnation handles the rest.
func (w *Watcher) handleQueued() {
	for len(w.queued) > 0 {
		e := w.queued[0]
		w.queued[0] = watcher.Event{} // its object is the View's now
		w.queued = w.queued[1:]
		w.tracker.Handle(e)
	}
	w.queued = nil // the backing array, sized by the last burst, goes
}

// healthStageSource is the Watcher's stage in Config.Health: source
// changes are queued until a flush hands them to the Proxier.
const healthStageSource = "source"

// flush sends all the tracker's changes to the Proxier and says whether
// there were any.
func (w *Watcher) flush(ctx actor.Context) bool {
	start := time.Now()
	w.handleQueued()
	if !w.tracker.Pending() {
		w.settled()
		return false
	}
	return w.apply(ctx, w.tracker.Flush(), start)
}

// settled records, once nothing waits for a flush, that every queued
// change was handed on.
func (w *Watcher) settled() {
	if w.tracker.Pending() {
		return
	}
	w.cfg.Health.Updated(healthStageSource)
	w.cfg.Metrics.Flushed()
}

// apply sends ch, a flush's changes begun at start, to the Proxier and
// says whether there were any.
func (w *Watcher) apply(ctx actor.Context, ch watcher.Changes, start time.Time) bool {
	defer w.settled()
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

// observeTriggers records, once per trigger time, how long the changed
// services took from their trigger to this flush.
func (w *Watcher) observeTriggers(ch watcher.Changes) {
	if len(ch.Triggers) == 0 || w.cfg.Metrics == nil {
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
		t := ch.Triggers[svc]
		if t.After(w.triggers[svc]) {
			w.triggers[svc] = t
			w.cfg.Metrics.NetworkProgrammed(t)
		}
	}
}
