package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
)

// Balancer owns a service port's endpoint set and round-robin positions, one
// per traffic scope (internal, external), and answers PickEndpoint. With
// ClientIP affinity on it forwards its choice to the Affinity actor, which
// answers the caller directly.
type Balancer struct {
	internal, external *balancer.RoundRobin
	affinity           bool
	configured         bool
	// Picks that arrive before the first SetEndpoints of this incarnation
	// (just after a restart) wait here instead of failing.
	pending []pendingPick
}

type pendingPick struct {
	sender *actor.PID
	pick   *messages.PickEndpoint
}

func newBalancer() actor.Actor {
	return &Balancer{internal: balancer.NewRoundRobin(nil), external: balancer.NewRoundRobin(nil)}
}

// Receive implements actor.Actor.
func (b *Balancer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleBalancer})
	case *messages.SetEndpoints:
		var in, ex []string
		for _, e := range m.GetEndpoints() {
			addr := e.Address()
			if addr == "" {
				continue
			}
			if e.GetInternal() {
				in = append(in, addr)
			}
			if e.GetExternal() {
				ex = append(ex, addr)
			}
		}
		b.internal.Update(in)
		b.external.Update(ex)
		b.affinity = m.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP
		b.configured = true
		for _, p := range b.pending {
			b.pick(ctx, p.sender, p.pick)
		}
		b.pending = nil
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.PickEndpoint:
		if !b.configured {
			b.pending = append(b.pending, pendingPick{ctx.Sender(), m})
			return
		}
		b.pick(ctx, ctx.Sender(), m)
	}
}

func (b *Balancer) pick(ctx actor.Context, sender *actor.PID, m *messages.PickEndpoint) {
	rr := b.internal
	if m.GetExternal() {
		rr = b.external
	}
	addr, _ := rr.Next(m.GetExclude())
	if b.affinity {
		ctx.RequestWithCustomSender(siblingPID(ctx, roleAffinity), &messages.AffinityLookup{
			ClientIp: m.GetClientIp(), Exclude: m.GetExclude(), Fallback: addr,
		}, sender)
		return
	}
	ctx.Send(sender, &messages.Picked{Address: addr})
}

// siblingPID names another child of the same ServicePort. Children are
// spawned under fixed names, so no PID needs to travel in messages.
func siblingPID(ctx actor.Context, role string) *actor.PID {
	parent := ctx.Parent()
	return actor.NewPID(parent.Address, parent.Id+"/"+role)
}
