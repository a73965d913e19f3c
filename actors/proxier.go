package actors

import (
	"fmt"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/messages"
)

// Proxier owns the set of service ports: it creates a record and spawns a
// ServicePort for each new one, tells it each change, and marks its record
// deleted and stops it when the service port goes. It keeps the state each
// ServicePort reports.
type Proxier struct {
	cfg *Config
	// desired is the desired state and what it holds, which outlives this
	// incarnation: a restarted Proxier spawns a ServicePort for each of its
	// records, and they find their sockets, ports and pins there.
	desired *desiredState
	pids    map[string]*actor.PID // by service port ID
}

// desiredState is the Proxier's state that outlives its incarnations.
type desiredState struct {
	records map[string]*record // by service port ID
	seq     int64              // names records uniquely
	// reported counts the records with a report, so checking the first
	// state's completion costs nothing per report until the counts meet.
	reported int
	// first is set when the source's first state has been handed out
	// (FlushApplied), complete once every service port reported since.
	first, complete bool
}

func newProxier(cfg *Config, desired *desiredState) *actor.Props {
	return cfg.propsFor(func() actor.Actor { return &Proxier{cfg: cfg, desired: desired} })
}

// Receive implements actor.Actor.
func (p *Proxier) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.started(ctx)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.UpsertServicePort:
		p.upsert(ctx, m)
	case *messages.DeleteServicePort:
		p.delete(ctx, m)
	case *messages.ServicePortState:
		p.reported(ctx, m)
	case *messages.FlushApplied:
		p.desired.first = true
		p.checkComplete(ctx)
	case *messages.GetState:
		ctx.Respond(p.state())
	}
}

// started spawns a ServicePort for every record: none on the first start;
// after a restart, those the previous incarnation had (protoactor stopped
// them, and they left everything in their records).
func (p *Proxier) started(ctx actor.Context) {
	p.pids = map[string]*actor.PID{}
	if len(p.desired.records) == 0 {
		return
	}
	p.cfg.traceRestart(ctx)
	for _, rec := range p.desired.records {
		p.spawn(ctx, rec)
	}
	p.cfg.Log.Warn().Int("servicePorts", len(p.desired.records)).Msg("proxier restarted; its service ports carried over")
}

// upsert hands a service port's desired state to its ServicePort,
// creating the record and the ServicePort for a new service port.
func (p *Proxier) upsert(ctx actor.Context, m *messages.UpsertServicePort) {
	id := m.GetServicePort().GetKey().ID()
	span, tc := p.cfg.childSpan(m.GetTrace(), spanProxierUpsert, trace.WithAttributes(attrServicePort.String(id), attrGeneration.Int64(m.GetGeneration())))
	defer span.End()
	m.Trace = tc
	rec := p.desired.records[id]
	if rec == nil {
		p.desired.seq++
		name := recordName(id, p.desired.seq)
		rec = &record{id: id, name: name, sockets: p.cfg.listeners.Sockets(name)}
		p.desired.records[id] = rec
		rec.upsert.Store(m)
		p.spawn(ctx, rec) // it reads m from the record
		span.SetAttributes(attribute.Bool("kproxy.new", true))
	} else {
		rec.upsert.Store(m)
		ctx.Send(p.pids[id], m)
	}
	p.serviceHealth(id, m)
}

// delete marks the service port's record deleted and stops its
// ServicePort, which releases what the record holds.
func (p *Proxier) delete(ctx actor.Context, m *messages.DeleteServicePort) {
	id := m.GetKey().ID()
	rec := p.desired.records[id]
	if rec == nil {
		return
	}
	span, _ := p.cfg.childSpan(m.GetTrace(), spanProxierDelete, trace.WithAttributes(attrServicePort.String(id), attrGeneration.Int64(m.GetGeneration())))
	defer span.End()
	rec.deleted.Store(true)
	if rec.reported != nil {
		p.desired.reported--
	}
	if pid := p.pids[id]; pid != nil {
		ctx.Stop(pid) // the ServicePort, once stopped, releases the record
	}
	delete(p.pids, id)
	delete(p.desired.records, id)
	p.cfg.ServiceHealth.Delete(id)
	p.cfg.Log.Info().Str("servicePort", id).Msg("service port deleted")
	ctx.ActorSystem().EventStream.Publish(&messages.ServicePortState{Key: m.GetKey(), Deleted: true, Generation: m.GetGeneration()})
}

// reported keeps a ServicePort's report and publishes it.
func (p *Proxier) reported(ctx actor.Context, m *messages.ServicePortState) {
	id := m.GetKey().ID()
	rec := p.desired.records[id]
	if rec == nil || !ctx.Sender().Equal(p.pids[id]) {
		return // from a service port deleted since (maybe added again)
	}
	if rec.reported == nil {
		p.desired.reported++
	}
	rec.reported = m
	ctx.ActorSystem().EventStream.Publish(m)
	p.checkComplete(ctx)
}

func (p *Proxier) state() *messages.StateSnapshot {
	snap := &messages.StateSnapshot{}
	for _, rec := range p.desired.records {
		if rec.reported != nil {
			snap.ServicePorts = append(snap.ServicePorts, proto.CloneOf(rec.reported))
		}
	}
	slices.SortFunc(snap.ServicePorts, func(a, b *messages.ServicePortState) int {
		return strings.Compare(a.GetKey().ID(), b.GetKey().ID())
	})
	return snap
}

// checkComplete tells the Rules actor, once, that every service port of
// the source's first state has reported, so has sent its rules (a
// ServicePort sends them before its report): a full sync now replaces
// the table with a complete one.
//
// Then the held listeners start serving, and Config.FirstStateReported
// is called (all modes).
func (p *Proxier) checkComplete(ctx actor.Context) {
	d := p.desired
	if !d.first || d.complete || d.reported < len(d.records) {
		return
	}
	d.complete = true
	p.cfg.listeners.StartServing()
	p.cfg.Ready.Done(healthcheck.StageServicePorts)
	if p.cfg.rulesPID != nil {
		ctx.Send(p.cfg.rulesPID, &messages.DesiredStateComplete{})
	}
	if p.cfg.FirstStateReported != nil {
		p.cfg.FirstStateReported(len(d.records))
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

// spawn starts rec's ServicePort under the record's name.
func (p *Proxier) spawn(ctx actor.Context, rec *record) {
	pid, err := ctx.SpawnNamed(p.cfg.spawnProps(rec, roleServicePort), rec.name)
	if err != nil {
		p.cfg.Log.Error().Err(err).Str("servicePort", rec.id).Msg("cannot start the service port")
		return
	}
	p.pids[rec.id] = pid
}
