package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

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
	table       *balancer.AffinityTable
	endpoints   map[string]bool
	cancelSweep scheduler.CancelFunc
}

func newAffinity() actor.Actor { return &Affinity{} }

// Receive implements actor.Actor.
func (a *Affinity) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.table = balancer.NewAffinityTable(0, nil)
		// A timer, not ReceiveTimeout: protoactor's ReceiveTimeout has a data race.
		a.cancelSweep = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).
			SendRepeatedly(affinitySweepInterval, affinitySweepInterval, ctx.Self(), &messages.SweepAffinity{})
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleAffinity})
	case *actor.Restarting:
		a.cancelSweep()
		ctx.Send(ctx.Parent(), &messages.AffinityEntries{Entries: a.table.Entries()})
	case *actor.Stopping:
		a.cancelSweep()
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.SetEndpoints:
		a.table.SetTTL(time.Duration(m.GetAffinityTimeoutSeconds()) * time.Second)
		a.endpoints = make(map[string]bool, len(m.GetEndpoints()))
		for _, e := range m.GetEndpoints() {
			a.endpoints[e.Address()] = true
		}
		for client, ep := range m.GetAffinityEntries().GetEntries() {
			a.table.Record(client, ep)
		}
		a.table.Retain(func(ep string) bool { return a.endpoints[ep] })
	case *messages.AffinityLookup:
		addr, ok := a.table.Lookup(m.GetClientIp(), m.GetExclude())
		if !ok {
			addr = m.GetFallback()
			if addr != "" {
				a.table.Record(m.GetClientIp(), addr)
			}
		}
		ctx.Respond(&messages.Picked{Address: addr})
	case *messages.SweepAffinity:
		a.table.Sweep()
	}
}
