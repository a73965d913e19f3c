package actors

import (
	"fmt"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// Proxier owns the set of service ports: it spawns, updates and stops one
// ServicePort supervisor per key, and keeps the latest state each reports.
type Proxier struct {
	cfg   *Config
	ports map[string]*actor.PID
	state map[string]*messages.ServicePortState
	// The last desired state of each service port, re-sent to a ServicePort
	// that restarted (its children and state are rebuilt from it).
	last map[string]*messages.UpsertServicePort
	ids  map[string]string // ServicePort PID id -> service port id
	// fresh holds service ports spawned by upsert whose ServicePort has not
	// yet said ChildStarted: upsert sent it its state with the spawn, so
	// that first ChildStarted needs no answer.
	fresh map[string]bool
	// first is set when the source's first state has been handed out
	// (FlushApplied), complete once every service port reported since.
	first, complete bool
}

// newProxier returns the same instance on every (re)start: the desired
// state and the reported state are kept, and a restart only replaces the
// ServicePort actors (see restarted).
func newProxier(cfg *Config) actor.Producer {
	p := &Proxier{cfg: cfg}
	return func() actor.Actor { return p }
}

// Receive implements actor.Actor.
func (p *Proxier) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if p.ports != nil {
			p.cfg.traceRestart(ctx)
			p.restarted(ctx)
			return
		}
		p.ports = map[string]*actor.PID{}
		p.state = map[string]*messages.ServicePortState{}
		p.last = map[string]*messages.UpsertServicePort{}
		p.ids = map[string]string{}
		p.fresh = map[string]bool{}
	case *actor.Restarting:
		// protoactor stops every ServicePort now; they keep what serves.
		p.cfg.handover.Store(true)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.UpsertServicePort:
		p.upsert(ctx, m)
	case *messages.ChildStarted:
		id, ok := p.ids[ctx.Sender().GetId()]
		if !ok || p.last[id] == nil {
			return
		}
		if p.fresh[id] {
			delete(p.fresh, id)
			return
		}
		up := proto.CloneOf(p.last[id])
		up.ProxyPort = p.state[id].GetProxyPort()
		up.ExternalProxyPort = p.state[id].GetExternalProxyPort()
		up.Restarts = p.state[id].GetRestarts() + 1
		// The previous ServicePort reported this generation, so it had sent
		// these endpoints to its Balancer.
		up.EndpointsSent = p.state[id].GetGeneration() == up.GetGeneration()
		up.Trace = nil // a restart, not the change that last came
		ctx.Respond(up)
	case *messages.DeleteServicePort:
		id := m.GetKey().ID()
		if pid := p.ports[id]; pid != nil {
			span, _ := p.cfg.childSpan(m.GetTrace(), spanProxierDelete, trace.WithAttributes(attrServicePort.String(id), attrGeneration.Int64(m.GetGeneration())))
			defer span.End()
			ctx.Stop(pid)
			delete(p.ports, id)
			delete(p.state, id)
			delete(p.last, id)
			delete(p.ids, pid.GetId())
			delete(p.fresh, id)
			p.cfg.ServiceHealth.Delete(id)
			p.cfg.Log.Info().Str("servicePort", id).Msg("service port deleted")
			ctx.ActorSystem().EventStream.Publish(&messages.ServicePortState{Key: m.GetKey(), Deleted: true, Generation: m.GetGeneration()})
		}
	case *messages.ServicePortState:
		id := m.GetKey().ID()
		if pid := p.ports[id]; pid == nil || pid.GetId() != ctx.Sender().GetId() {
			return // from a service port already deleted
		}
		p.state[id] = m
		ctx.ActorSystem().EventStream.Publish(m)
		p.checkComplete(ctx)
	case *messages.FlushApplied:
		p.first = true
		p.checkComplete(ctx)
	case *messages.GetState:
		snap := &messages.StateSnapshot{}
		for _, st := range p.state {
			snap.ServicePorts = append(snap.ServicePorts, proto.CloneOf(st))
		}
		slices.SortFunc(snap.ServicePorts, func(a, b *messages.ServicePortState) int {
			return strings.Compare(a.GetKey().ID(), b.GetKey().ID())
		})
		ctx.Respond(snap)
	}
}

// upsert hands a service port's desired state to its ServicePort,
// starting one for a new service port.
func (p *Proxier) upsert(ctx actor.Context, m *messages.UpsertServicePort) {
	id := m.GetServicePort().GetKey().ID()
	span, tc := p.cfg.childSpan(m.GetTrace(), spanProxierUpsert, trace.WithAttributes(attrServicePort.String(id), attrGeneration.Int64(m.GetGeneration())))
	defer span.End()
	pid := p.ports[id]
	if pid == nil {
		pid = p.spawn(ctx, id)
		p.fresh[id] = true
		span.SetAttributes(attribute.Bool("kproxy.new", true))
	}
	m.Trace = tc
	p.last[id] = m
	ctx.Send(pid, m)
	p.serviceHealth(id, m)
}

// checkComplete tells the Rules actor, once, that every service port of
// the source's first state has reported, so has sent its rules (a
// ServicePort sends them before its report): a full sync now replaces
// the table with a complete one.
//
// It also calls Config.FirstStateReported then (all modes). Only service
// ports with a PID have a state, so counting is enough until the counts
// meet (one check per report, not a walk over every service port).
func (p *Proxier) checkComplete(ctx actor.Context) {
	if !p.first || p.complete || len(p.state) < len(p.ports) {
		return
	}
	for id := range p.ports {
		if p.state[id] == nil {
			return
		}
	}
	p.complete = true
	if p.cfg.rulesPID != nil {
		ctx.Send(p.cfg.rulesPID, &messages.DesiredStateComplete{})
	}
	if p.cfg.FirstStateReported != nil {
		p.cfg.FirstStateReported(len(p.ports))
	}
}

// serviceHealth tells the health-check node ports a service port's local
// ready endpoints (kube-proxy counts those).
func (p *Proxier) serviceHealth(id string, m *messages.UpsertServicePort) {
	local := 0
	for _, e := range m.GetEndpoints() {
		if e.GetLocal() && e.GetReady() {
			local++
		}
	}
	k := m.GetServicePort().GetKey()
	p.cfg.ServiceHealth.Upsert(id, k.GetNamespace(), k.GetName(), int(m.GetServicePort().GetHealthCheckNodePort()), local)
}

func (p *Proxier) spawn(ctx actor.Context, id string) *actor.PID {
	return p.adopt(id, ctx.SpawnPrefix(p.cfg.props[roleServicePort], servicePortPrefix(id)))
}

func (p *Proxier) adopt(id string, pid *actor.PID) *actor.PID {
	p.ports[id] = pid
	p.ids[pid.GetId()] = id
	return pid
}

// restarted starts a ServicePort again for every service port after a
// restart of the Proxier. protoactor stopped the previous ones; during the
// handover they kept their sockets (paused, connections and flows on),
// proxy ports, kernel rules and affinity pins. The new ones take the same
// names, so their PIDs are the previous ones: connections accepted before
// keep asking the same Balancer PID (and get the new Balancer), and the
// sockets and pins are found where they were left. Their desired state
// with the same proxy ports comes through ChildStarted, as after a
// ServicePort restart.
func (p *Proxier) restarted(ctx actor.Context) {
	old := p.ports
	p.ports, p.ids, p.fresh = map[string]*actor.PID{}, map[string]string{}, map[string]bool{}
	for id := range p.last {
		prev := old[id]
		if prev == nil {
			p.spawn(ctx, id)
			continue
		}
		pid, err := ctx.SpawnNamed(p.cfg.props[roleServicePort], strings.TrimPrefix(prev.GetId(), ctx.Self().GetId()+"/"))
		if err != nil {
			p.cfg.Log.Error().Err(err).Str("servicePort", id).Msg("cannot start the service port again under its name")
			p.spawn(ctx, id)
			continue
		}
		// Its pins, saved under its name, it takes itself when it starts
		// (one taker: pins sent in a message were lost when this Proxier
		// crashed again before the ServicePort read it).
		p.adopt(id, pid)
	}
	p.cfg.handover.Store(false)
	p.cfg.Log.Warn().Int("servicePorts", len(p.last)).Msg("proxier restarted; its service ports carried over")
}
