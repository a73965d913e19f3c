package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
)

// affinitySweepInterval is how often expired ClientIP entries are dropped.
const affinitySweepInterval = 10 * time.Second

// Affinity owns a service port's ClientIP affinity table. It is started the
// first time the service has sessionAffinity ClientIP. Pinned clients stay
// pinned across a crash: the failing incarnation hands its entries to the
// ServicePort while restarting, and the new one gets them back with its
// endpoints (their idle clocks restart, so a crash can only lengthen a pin).
type Affinity struct {
	cfg         *Config
	pins        *balancer.ScopedAffinity
	cancelSweep scheduler.CancelFunc
}

func newAffinity(cfg *Config) actor.Producer {
	return func() actor.Actor { return &Affinity{cfg: cfg} }
}

// Receive implements actor.Actor.
func (a *Affinity) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.cfg.traceRestart(ctx)
		a.pins = balancer.NewScopedAffinity(0, nil)
		// A timer, not ReceiveTimeout: protoactor's ReceiveTimeout has a data race.
		a.cancelSweep = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).
			SendRepeatedly(affinitySweepInterval, affinitySweepInterval, ctx.Self(), &messages.SweepAffinity{})
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleAffinity})
	case *actor.Restarting:
		a.cancelSweep()
		ctx.Send(ctx.Parent(), &messages.AffinityEntries{Entries: a.pins.Table(false).Entries(), ExternalEntries: a.pins.Table(true).Entries()})
	case *actor.Stopping:
		a.cancelSweep()
		if a.cfg.handover.Load() { // the Proxier restarts: keep the pins for the next ServicePort
			a.cfg.pins.Store(ctx.Parent().GetId(), &messages.AffinityEntries{Entries: a.pins.Table(false).Entries(), ExternalEntries: a.pins.Table(true).Entries()})
		}
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.SetEndpoints:
		span, _ := a.cfg.childSpan(m.GetTrace(), spanAffinitySet, trace.WithAttributes(attrEndpoints.Int(len(m.GetEndpoints()))))
		a.setEndpoints(m)
		span.End()
	case *messages.AffinityLookup:
		ep, pinned := a.pins.Pick(m.GetExternal(), m.GetClientIp(), m.GetExclude(), m.GetFallback())
		ctx.Respond(&messages.Picked{Address: ep, Report: m.GetReport(), AffinityHit: pinned})
	case *messages.SweepAffinity:
		a.pins.Sweep()
	}
}

// setEndpoints applies the timeout, takes back the pins a previous
// incarnation saved, and drops the pins whose endpoint left its scope.
func (a *Affinity) setEndpoints(m *messages.SetEndpoints) {
	a.pins.SetTTL(time.Duration(m.GetAffinityTimeoutSeconds()) * time.Second)
	for client, ep := range m.GetAffinityEntries().GetEntries() {
		a.pins.Table(false).Record(client, ep)
	}
	for client, ep := range m.GetAffinityEntries().GetExternalEntries() {
		a.pins.Table(true).Record(client, ep)
	}
	a.pins.Retain(m.GetEndpoints())
}
