package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// Watcher turns source input into per-service-port changes for the
// Proxier, sending only what really changed, so an unchanged service port
// is never touched.
//
// Snapshot sources (files) send whole SourceSnapshots, diffed against the
// previous one. Incremental sources (Kubernetes informers) send
// ServiceChanged events; the Watcher coalesces them for Config.MinSyncPeriod
// (many events for one service in a window become one rebuild) and
// rebuilds only the services that changed, from the source's View.
type Watcher struct {
	cfg     *Config
	proxier *actor.PID
	last    map[string]*messages.ServicePortEndpoints // snapshot mode

	tracker *watcher.Tracker // incremental mode
	synced  bool
	armed   bool
	flushes int64
}

func newWatcher(cfg *Config, proxier *actor.PID) actor.Producer {
	return func() actor.Actor {
		w := &Watcher{cfg: cfg, proxier: proxier}
		if cfg.View != nil {
			w.tracker = watcher.NewTracker(cfg.View)
		}
		return w
	}
}

// Receive implements actor.Actor.
func (w *Watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Restarting:
		if w.tracker != nil {
			// The new incarnation starts from an empty tracker: rebuild everything.
			ctx.Send(ctx.Self(), &messages.SourceSynced{})
		}
	case *messages.SourceSnapshot:
		w.apply(ctx, m)
	case *messages.ServiceChanged:
		w.tracker.Mark(m.GetService())
		if w.synced && !w.armed {
			w.armed = true
			scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(w.cfg.MinSyncPeriod, ctx.Self(), &messages.FlushChanges{})
		}
	case *messages.SourceSynced:
		w.synced = true
		w.tracker.Mark("")
		w.flush(ctx)
	case *messages.FlushChanges:
		w.armed = false
		w.flush(ctx)
	case *messages.GetWatcherStats:
		st := &messages.WatcherStats{Flushes: w.flushes}
		if w.tracker != nil {
			st.Events, st.Changes = w.tracker.Events, w.tracker.Changes
		}
		ctx.Respond(st)
	}
}

// flush sends the tracker's changes to the Proxier.
func (w *Watcher) flush(ctx actor.Context) {
	if !w.tracker.Pending() {
		return
	}
	w.flushes++
	ch := w.tracker.Flush()
	for _, err := range ch.Errors {
		w.cfg.Log.Warn().Err(err).Msg("service rejected; its previous state is kept")
	}
	for _, spe := range ch.Upserts {
		ctx.Send(w.proxier, &messages.UpsertServicePort{ServicePort: spe.GetServicePort(), Endpoints: spe.GetEndpoints(), Generation: w.flushes})
	}
	for _, k := range ch.Deletes {
		ctx.Send(w.proxier, &messages.DeleteServicePort{Key: k, Generation: w.flushes})
	}
	w.cfg.Log.Debug().Int("upserts", len(ch.Upserts)).Int("deletes", len(ch.Deletes)).
		Int64("events", w.tracker.Events).Int64("changes", w.tracker.Changes).Msg("source changes applied")
}

func (w *Watcher) apply(ctx actor.Context, snap *messages.SourceSnapshot) {
	// Services whose input failed keep their previous state whole: bad input
	// must not drop or change what is serving.
	retained := func(k *messages.ServicePortKey) bool { return false }
	if snap.GetRetainMissing() || len(snap.GetRetainServices()) > 0 {
		retain := map[string]bool{}
		for _, svc := range snap.GetRetainServices() {
			retain[svc] = true
		}
		retained = func(k *messages.ServicePortKey) bool { return retain[k.GetNamespace()+"/"+k.GetName()] }
	}
	next := make(map[string]*messages.ServicePortEndpoints, len(snap.GetServicePorts()))
	var added, updated, deleted int
	for _, spe := range snap.GetServicePorts() {
		k := spe.GetServicePort().GetKey()
		id := k.ID()
		prev, ok := w.last[id]
		if ok && retained(k) {
			next[id] = prev
			continue
		}
		next[id] = spe
		if ok && proto.Equal(prev, spe) {
			continue
		}
		if ok {
			updated++
		} else {
			added++
		}
		ctx.Send(w.proxier, &messages.UpsertServicePort{ServicePort: spe.GetServicePort(), Endpoints: spe.GetEndpoints(), Generation: snap.GetGeneration()})
	}
	for id, prev := range w.last {
		if _, ok := next[id]; ok {
			continue
		}
		k := prev.GetServicePort().GetKey()
		if snap.GetRetainMissing() || retained(k) {
			next[id] = prev
			continue
		}
		deleted++
		ctx.Send(w.proxier, &messages.DeleteServicePort{Key: k, Generation: snap.GetGeneration()})
	}
	w.last = next
	w.cfg.Log.Info().Str("source", snap.GetSource()).Int64("generation", snap.GetGeneration()).
		Int("servicePorts", len(next)).Int("added", added).Int("updated", updated).Int("deleted", deleted).
		Msg("source synced")
}
