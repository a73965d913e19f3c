package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
)

// Balancer owns a service port's endpoint set and round-robin positions, one
// per traffic scope (internal, external) and IP family, and answers
// PickEndpoint. With
// ClientIP affinity on it forwards its choice to the Affinity actor, which
// answers the caller directly.
type Balancer struct {
	scopes     *balancer.Scopes
	affinity   bool
	configured bool
	// Picks that arrive before the first SetEndpoints of this incarnation
	// (just after a restart) wait here instead of failing.
	pending []pendingPick
}

type pendingPick struct {
	sender *actor.PID
	pick   *messages.PickEndpoint
}

func newBalancer() actor.Actor {
	return &Balancer{scopes: balancer.NewScopes(nil)}
}

// Receive implements actor.Actor.
func (b *Balancer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleBalancer})
	case *messages.SetEndpoints:
		b.scopes.Update(m.GetEndpoints())
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
	addr, _ := b.scopes.Next(m.GetExternal(), m.GetClientIp(), m.GetExclude())
	if b.affinity {
		ctx.RequestWithCustomSender(siblingPID(ctx, roleAffinity), &messages.AffinityLookup{
			ClientIp: m.GetClientIp(), Exclude: m.GetExclude(), Fallback: addr, External: m.GetExternal(),
		}, sender)
		return
	}
	ctx.Send(sender, &messages.Picked{Address: addr})
}
