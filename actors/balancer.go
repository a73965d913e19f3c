package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// Balancer owns a service port's endpoint set and round-robin positions, one
// per traffic scope (internal, external) and IP family, and answers
// PickEndpoint. It also owns outlier detection: endpoints whose dials keep
// failing (DialOutcome from the Portal's connections) are skipped until a
// probe of its own, when the ejection is up, reaches them. With ClientIP affinity on it forwards its choice to the Affinity
// actor, which answers the caller directly.
type Balancer struct {
	cfg      *Config
	rec      *record
	scopes   *balancer.Scopes
	outliers *balancer.Outliers
	affinity bool
	// version is that of the endpoint set applied; its Snapshots carry it.
	version int64
}

// Receive implements actor.Actor.
func (b *Balancer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		b.cfg.traceRestart(ctx)
		// The previous incarnation's Snapshot kept serving connections
		// while this one started; this one's replaces it at once.
		b.setEndpoints(ctx, b.rec.endpoints.Load())
	case *actor.Restarting:
		ctx.Send(ctx.Parent(), &messages.ChildRestarted{Role: roleBalancer})
	case *messages.SetEndpoints:
		b.setEndpoints(ctx, m)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.PickEndpoint:
		b.pick(ctx, ctx.Sender(), m)
	case *messages.DialOutcome:
		b.dialOutcome(ctx, m)
	case *messages.ProbeEndpoint:
		b.probe(ctx, m.GetEndpoint())
	}
}

// setEndpoints applies an endpoint set newer than the one applied: a
// SetEndpoints, or on start the record's latest (a set this incarnation
// read on start may come again from its mailbox). The ServicePort sends
// the set before it reports it, so a pick asked after the report is
// answered from it (record.setEndpoints).
func (b *Balancer) setEndpoints(ctx actor.Context, m *messages.SetEndpoints) {
	if m == nil || m.GetVersion() <= b.version {
		return
	}
	if b.cfg.Tracer != nil {
		span, _ := b.cfg.childSpan(m.GetTrace(), spanSetEndpoints, trace.WithAttributes(attrEndpoints.Int(len(m.GetEndpoints())),
			attrReadyEndpoints.Int(readyEndpoints(m.GetEndpoints())), attribute.String("kproxy.session_affinity", m.GetSessionAffinity().String())))
		defer span.End()
	}
	b.scopes.Update(m.GetEndpoints(), m.GetExternalScopeIsCluster())
	addrs := make([]string, 0, len(m.GetEndpoints()))
	for _, e := range m.GetEndpoints() {
		addrs = append(addrs, e.Address())
	}
	forgotEjected := b.outliers.Retain(addrs)
	b.affinity = m.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP
	b.version = m.GetVersion()
	// Connections see the change before anyone is told of it.
	b.publish()
	if forgotEjected {
		b.reportEjections(ctx)
	}
}

func (b *Balancer) pick(ctx actor.Context, sender *actor.PID, m *messages.PickEndpoint) {
	exclude := b.outliers.Skip(b.scopes.Members(m.GetExternal(), m.GetClientIp()), m.GetExclude())
	addr, _ := b.scopes.Next(m.GetExternal(), m.GetClientIp(), exclude)
	report := b.outliers.Watched(addr)
	if b.affinity {
		// Affinity may answer with the client's pinned endpoint instead:
		// while any endpoint is watched, ask for every outcome.
		ctx.RequestWithCustomSender(siblingPID(ctx, roleAffinity), &messages.AffinityLookup{
			ClientIp: m.GetClientIp(), Exclude: exclude, Fallback: addr, External: m.GetExternal(),
			Report: report || b.outliers.Watching(),
		}, sender)
		return
	}
	ctx.Send(sender, &messages.Picked{Address: addr, Report: report})
}

// publish gives connections a new Snapshot of the choices: after every
// change of the endpoints or of the outlier records. With ClientIP
// affinity there is none: the Affinity actor's table decides, so
// connections ask.
func (b *Balancer) publish() {
	h := &b.rec.snapshots
	if b.affinity {
		h.Store(nil)
		return
	}
	snap := b.scopes.Snapshot(b.outliers, &h.Positions)
	snap.Version = b.version
	h.Store(snap)
}

func (b *Balancer) dialOutcome(ctx actor.Context, m *messages.DialOutcome) {
	ep := m.GetEndpoint()
	if !m.GetFailed() {
		restored := b.outliers.Succeeded(ep)
		b.publish() // the record is gone: connections see it before the state does
		if restored {
			b.reportEjections(ctx)
		}
		return
	}
	var d time.Duration
	if m.GetTimedOut() {
		d = b.outliers.TimedOut(ep, time.Now())
	} else {
		d = b.outliers.Failed(ep, time.Now())
	}
	b.outliers.Explain(ep, m.GetError())
	b.publish()
	if d > 0 {
		b.cfg.Metrics.Ejected()
		scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(d, ctx.Self(), &messages.ProbeEndpoint{Endpoint: ep})
		b.reportEjections(ctx)
	}
}

// probe dials an endpoint whose ejection is up, off the actor; the outcome
// comes back as a DialOutcome.
func (b *Balancer) probe(ctx actor.Context, ep string) {
	if !b.outliers.Ejected(ep) {
		return // restored or removed meanwhile, or a timer of an earlier incarnation
	}
	root, self, faults := ctx.ActorSystem().Root, ctx.Self(), b.cfg.Faults
	go func() {
		root.Send(self, dialOutcome(ep, datapath.Probe(ep, faults)))
	}()
}

// reportEjections tells the ServicePort, which keeps the state view and
// logs the change.
func (b *Balancer) reportEjections(ctx actor.Context) {
	msg := &messages.EndpointEjections{}
	for _, e := range b.outliers.Ejections() {
		msg.Ejected = append(msg.Ejected, &messages.EjectedEndpoint{
			Endpoint: e.Endpoint, UntilUnixMilli: e.Until.UnixMilli(), Ejections: int32(e.Ejections), LastError: e.LastError})
	}
	ctx.Send(ctx.Parent(), msg)
}

func readyEndpoints(eps []*messages.Endpoint) int {
	n := 0
	for _, e := range eps {
		if e.GetReady() {
			n++
		}
	}
	return n
}
