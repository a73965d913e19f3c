package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// Watcher turns source snapshots into per-service-port changes: it diffs
// each snapshot against the last one and sends the Proxier only what
// really changed, so an unchanged service port is never touched.
type Watcher struct {
	cfg     *Config
	proxier *actor.PID
	last    map[string]*messages.ServicePortEndpoints
}

func newWatcher(cfg *Config, proxier *actor.PID) actor.Producer {
	return func() actor.Actor { return &Watcher{cfg: cfg, proxier: proxier} }
}

// Receive implements actor.Actor.
func (w *Watcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.SourceSnapshot:
		w.apply(ctx, m)
	}
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
