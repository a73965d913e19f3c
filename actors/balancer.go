package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/actors/metrics"
	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
)

// Balancer owns a service port's endpoint set and round-robin positions, one
// per traffic scope (internal, external) and IP family, and answers
// PickEndpoint. It also owns outlier detection: endpoints whose dials keep
// failing (DialOutcome from the Portal's connections) are skipped until a
// probe of its own, when the ejection is up, reaches them. With ClientIP affinity on it forwards its choice to the Affinity
// actor, which answers the caller directly.
type Balancer struct {
	cfg        *Config
	faults     *portal.Faults // probes see injected faults, as connections do
	metrics    *metrics.Metrics
	scopes     *balancer.Scopes
	outliers   *balancer.Outliers
	affinity   bool
	configured bool
	// version is that of the last endpoint set applied; its Snapshots
	// carry it (SnapshotHolder.Load).
	version int64
	// snapshot is where this service port's picks are published for its
	// connections, which pick from it without asking the actor (no
	// affinity); the actor stays its only writer.
	snapshot *balancer.SnapshotHolder
	// Picks that arrive before the first SetEndpoints of this incarnation
	// (just after a restart) wait here instead of failing.
	pending []pendingPick
}

type pendingPick struct {
	sender *actor.PID
	pick   *messages.PickEndpoint
}

func newBalancer(cfg *Config) actor.Producer {
	return func() actor.Actor {
		return &Balancer{cfg: cfg, faults: cfg.Faults, metrics: cfg.Metrics, scopes: balancer.NewScopes(nil), outliers: balancer.NewOutliers(cfg.Outliers)}
	}
}

// Receive implements actor.Actor.
func (b *Balancer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		b.cfg.traceRestart(ctx)
		// A restarted incarnation takes over the holder: its predecessor's
		// last Snapshot keeps serving connections until this one has its
		// endpoints. Also when the ServicePort or the Proxier restarts
		// (so not cleared on Stopping): no connection waits on an actor
		// round trip that a slow restart could time out. The ServicePort
		// drops the Snapshot when the service port goes for good.
		b.snapshot = b.cfg.snapshotHolder(ctx.Self().GetId())
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleBalancer})
	case *messages.SetEndpoints:
		b.setEndpoints(ctx, m)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.PickEndpoint:
		if !b.configured {
			b.pending = append(b.pending, pendingPick{ctx.Sender(), m})
			return
		}
		b.pick(ctx, ctx.Sender(), m)
	case *messages.DialOutcome:
		b.dialOutcome(ctx, m)
	case *messages.ProbeEndpoint:
		b.probe(ctx, m.GetEndpoint())
	}
}

func (b *Balancer) setEndpoints(ctx actor.Context, m *messages.SetEndpoints) {
	if b.cfg.Tracer != nil {
		span, _ := b.cfg.childSpan(m.GetTrace(), spanSetEndpoints, trace.WithAttributes(attrEndpoints.Int(len(m.GetEndpoints())),
			attrReadyEndpoints.Int(readyEndpoints(m.GetEndpoints())), attribute.String("kproxy.session_affinity", m.GetSessionAffinity().String())))
		defer span.End()
	}
	b.scopes.Update(m.GetEndpoints())
	addrs := make([]string, 0, len(m.GetEndpoints()))
	for _, e := range m.GetEndpoints() {
		addrs = append(addrs, e.Address())
	}
	forgotEjected := b.outliers.Retain(addrs)
	b.affinity = m.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP
	b.configured, b.version = true, m.GetVersion()
	// Connections see the change before anyone is told of it.
	b.publish()
	if forgotEjected {
		b.reportEjections(ctx)
	}
	for _, p := range b.pending {
		b.pick(ctx, p.sender, p.pick)
	}
	b.pending = nil
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
	if !b.configured || b.affinity {
		b.snapshot.Store(nil)
		return
	}
	snap := b.scopes.Snapshot(b.outliers, &b.snapshot.Positions)
	snap.Version = b.version
	b.snapshot.Store(snap)
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
	b.publish()
	if d > 0 {
		b.metrics.Ejected()
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
	root, self, faults := ctx.ActorSystem().Root, ctx.Self(), b.faults
	go func() {
		root.Send(self, dialOutcome(ep, portal.Probe(ep, faults)))
	}()
}

// reportEjections tells the ServicePort, which keeps the state view and
// logs the change.
func (b *Balancer) reportEjections(ctx actor.Context) {
	msg := &messages.EndpointEjections{}
	for _, e := range b.outliers.Ejections() {
		msg.Ejected = append(msg.Ejected, &messages.EjectedEndpoint{
			Endpoint: e.Endpoint, UntilUnixMilli: e.Until.UnixMilli(), Ejections: int32(e.Ejections)})
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
