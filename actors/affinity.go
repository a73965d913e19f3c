package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/messages"
)

// affinitySweepInterval is how often expired ClientIP entries are dropped.
const affinitySweepInterval = 10 * time.Second

// Affinity owns a service port's ClientIP affinity lookups and the sweep
// of expired pins. It is started the first time the service has
// sessionAffinity ClientIP. The table itself is the service port's record's:
// pinned clients stay pinned across a crash of this actor, of its
// ServicePort or of the Proxier (a panic mid-update can at worst leave one
// pin the sweep or the next endpoint set removes).
type Affinity struct {
	cfg         *Config
	rec         *record
	version     int64 // of the endpoint set applied
	cancelSweep scheduler.CancelFunc
}

// Receive implements actor.Actor.
func (a *Affinity) Receive(ctx actor.Context) {
	a.cfg.borrow(&a.rec, ctx.Parent())
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.cfg.traceRestart(ctx)
		// A timer, not ReceiveTimeout: protoactor's ReceiveTimeout has a data race.
		a.cancelSweep = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).
			SendRepeatedly(affinitySweepInterval, affinitySweepInterval, ctx.Self(), &messages.SweepAffinity{})
		a.current(ctx)
	case *actor.Restarting:
		a.cancelSweep()
		ctx.Send(ctx.Parent(), &messages.ChildRestarted{Role: roleAffinity})
	case *actor.Stopping:
		a.cancelSweep()
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.SetEndpoints:
		a.current(ctx)
	case *messages.AffinityLookup:
		a.current(ctx)
		ep, pinned := a.rec.pins.Pick(m.GetExternal(), m.GetClientIp(), m.GetExclude(), m.GetFallback())
		ctx.Respond(&messages.Picked{Address: ep, Report: m.GetReport(), AffinityHit: pinned})
	case *messages.SweepAffinity:
		a.rec.pins.Sweep()
	}
}

// current applies the service port's latest endpoint set, if not yet: the
// timeout, and drops the pins whose endpoint left its scope.
func (a *Affinity) current(ctx actor.Context) {
	m := a.rec.endpoints.Load()
	if m == nil || m.GetVersion() <= a.version {
		return
	}
	span, _ := a.cfg.childSpan(m.GetTrace(), spanAffinitySet, trace.WithAttributes(attrEndpoints.Int(len(m.GetEndpoints()))))
	defer span.End()
	a.version = m.GetVersion()
	a.rec.pins.SetTTL(time.Duration(m.GetAffinityTimeoutSeconds()) * time.Second)
	a.rec.pins.Retain(m.GetEndpoints())
}
