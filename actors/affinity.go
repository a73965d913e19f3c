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
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.cfg.traceRestart(ctx)
		// A timer, not ReceiveTimeout: protoactor's ReceiveTimeout has a data race.
		a.cancelSweep = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).
			SendRepeatedly(affinitySweepInterval, affinitySweepInterval, ctx.Self(), &messages.SweepAffinity{})
		a.setEndpoints(a.rec.endpoints.Load())
	case *actor.Restarting:
		a.cancelSweep()
		ctx.Send(ctx.Parent(), &messages.ChildRestarted{Role: roleAffinity})
	case *actor.Stopping:
		a.cancelSweep()
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.SetEndpoints:
		a.setEndpoints(m)
	case *messages.AffinityLookup:
		ep, pinned := a.rec.pins.Pick(m.GetExternal(), m.GetClientIp(), m.GetExclude(), m.GetFallback())
		ctx.Respond(&messages.Picked{Address: ep, Report: m.GetReport(), AffinityHit: pinned})
	case *messages.SweepAffinity:
		a.rec.pins.Sweep()
	}
}

// setEndpoints applies an endpoint set newer than the one applied (see
// Balancer.setEndpoints): the timeout, and drops the pins whose endpoint
// left its scope. The ServicePort tells this actor before the Balancer,
// so a lookup the Balancer forwards from a set comes after that set.
func (a *Affinity) setEndpoints(m *messages.SetEndpoints) {
	if m == nil || m.GetVersion() <= a.version {
		return
	}
	span, _ := a.cfg.childSpan(m.GetTrace(), spanAffinitySet, trace.WithAttributes(attrEndpoints.Int(len(m.GetEndpoints()))))
	defer span.End()
	a.version = m.GetVersion()
	a.rec.pins.SetTTL(time.Duration(m.GetAffinityTimeoutSeconds()) * time.Second)
	a.rec.pins.Retain(m.GetEndpoints(), m.GetExternalScopeIsCluster())
}
