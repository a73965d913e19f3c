package actors

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/steer"
	"github.com/kproxy/kproxy/watcher"
)

// Child names under a ServicePort; siblings find each other by them.
const (
	rolePortal   = "portal"
	roleBalancer = "balancer"
	roleAffinity = "affinity"
	// roleServicePort names the ServicePort itself (metrics, faults).
	roleServicePort = "serviceport"
)

// ServicePort supervises one service port's Portal, Balancer and Affinity.
// What the service port holds lives in its record, which outlives this
// actor: a (re)started ServicePort applies the record's desired state and
// spawns its children, which read their configuration from the record.
type ServicePort struct {
	cfg      *Config
	rec      *record
	children children
	// added is set until the new service port's Portal first reports.
	added bool
	// rulesSent is what the last SetPortalRules was made of: an endpoint
	// change that keeps the verdicts sends none. A new incarnation sends
	// again (the Rules actor keeps what it has).
	rulesSent *portalRulesInput
}

// portalRulesInput is what a service port's kernel rules depend on.
type portalRulesInput struct {
	sp                 *messages.ServicePort // the Tracker hands an unchanged one on as is
	proxyPort, extPort int
	internal, external rules.Verdict
}

// Receive implements actor.Actor.
func (s *ServicePort) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.start(ctx)
	case *actor.Stopped:
		s.stopped(ctx)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.UpsertServicePort:
		s.update(ctx, m)
	case *messages.ChildRestarted:
		s.childRestarted(ctx, m.GetRole())
	case *messages.ListenerReady:
		s.listenerReady(ctx, m)
	case *messages.RetryProxyPort:
		s.allocate(ctx)
	case *messages.EndpointEjections:
		s.ejections(ctx, m)
	}
}

// start applies the record's desired state and spawns the children. The
// first incarnation also takes the proxy ports; a later one (this actor or
// the Proxier restarted) finds them in the record, with the sockets.
func (s *ServicePort) start(ctx actor.Context) {
	s.cfg.traceRestart(ctx)
	s.children = children{}
	rec, event := s.rec, "service port added"
	first := !rec.status.started
	if first {
		rec.status.started = true
		up := rec.upsert.Load()
		s.takePorts(ctx, up.GetServicePort().GetKey().GetProtocol())
		s.applyChange(up)
	} else {
		rec.status.restarts++
		event = "service port restarted"
		if up := rec.upsert.Load(); up != rec.applied {
			s.applyChange(up)
		}
	}
	s.syncAffinity(ctx) // before the Balancer, which forwards lookups to it
	s.spawn(ctx, roleBalancer)
	s.spawn(ctx, rolePortal)
	if first && rec.portal.Load() != nil {
		// The Portal reports its listeners as soon as it opened them: the
		// service port's first report waits for that, one report, not two.
		s.added = true
		return
	}
	s.report(ctx, event)
}

// stopped releases what the record holds if the service port left the
// desired state: sockets, proxy ports, Snapshot, counters, kernel rules.
// Otherwise (its Proxier restarts, or the process stops) the record keeps
// all of it for whoever comes next.
func (s *ServicePort) stopped(ctx actor.Context) {
	rec := s.rec
	if !rec.deleted.Load() {
		return
	}
	rec.sockets.Close()
	rec.snapshots.Store(nil) // a connection still picking asks the Balancer, which is gone
	s.cfg.Stats.Delete(rec.id)
	network, _ := datapath.Network(rec.applied.GetServicePort().GetKey().GetProtocol()) // ports exist only for supported ones
	for _, port := range []int{rec.proxyPort, rec.extPort} {
		if port != 0 {
			s.cfg.Ports.Release(network, port)
		}
	}
	if s.cfg.rulesPID != nil && rec.proxyPort != 0 {
		ctx.Send(s.cfg.rulesPID, &messages.DeletePortalRules{Key: rec.applied.GetServicePort().GetKey()})
	}
}

// takePorts gives the service port its proxy port: a previous process's,
// still free, so the kernel rules it left stay right; or a new one.
func (s *ServicePort) takePorts(ctx actor.Context, protocol messages.Protocol) {
	rec := s.rec
	network, err := datapath.Network(protocol)
	switch {
	case err != nil:
	case !datapath.UsesProxyPorts(s.cfg.PortalMode):
		// The bind portal listens on the service addresses alone.
	case s.cfg.Ports.Claim(network, s.cfg.RecoveredPorts[rec.id].Proxy):
		rec.proxyPort = s.cfg.RecoveredPorts[rec.id].Proxy
	default:
		rec.proxyPort, err = s.cfg.Ports.Allocate(network)
	}
	rec.portErr = err
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("servicePort", rec.id).Msg("cannot allocate proxy port, retrying")
		s.scheduleAllocate(ctx)
	}
}

// scheduleAllocate retries the proxy port's allocation later, backing off
// from 100 ms to 10 s: ports free up as other service ports go.
func (s *ServicePort) scheduleAllocate(ctx actor.Context) {
	if errors.Is(s.rec.portErr, datapath.ErrUnsupportedProtocol) {
		return // no retry makes SCTP proxiable
	}
	s.rec.portRetry = min(max(2*s.rec.portRetry, 100*time.Millisecond), 10*time.Second)
	scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(s.rec.portRetry, ctx.Self(), &messages.RetryProxyPort{})
}

// allocate retries the proxy port; once it has one, the Portal gets its
// configuration and the service port serves.
func (s *ServicePort) allocate(ctx actor.Context) {
	rec := s.rec
	if rec.portErr == nil {
		return
	}
	network, _ := datapath.Network(rec.applied.GetServicePort().GetKey().GetProtocol())
	port, err := s.cfg.Ports.Allocate(network)
	if err != nil {
		rec.portErr = err
		s.scheduleAllocate(ctx)
		return
	}
	rec.proxyPort, rec.portErr, rec.portRetry = port, nil, 0
	rec.status.err, rec.status.failures = "", nil
	wasCluster := rec.externalIsCluster
	s.syncExternalPort()
	s.configurePortal()
	s.tell(ctx, rec.portal.Load(), rolePortal)
	if rec.externalIsCluster != wasCluster {
		// The external port's scope changed with it: the same endpoints,
		// served from the other scope there.
		s.apply(false, true)
		s.tell(ctx, rec.endpoints.Load(), roleAffinity, roleBalancer, rolePortal)
	}
	s.report(ctx, "proxy port allocated")
}

// childRestarted counts a child's restart; what that child reported is
// void until its new incarnation reports.
func (s *ServicePort) childRestarted(ctx actor.Context, role string) {
	st := &s.rec.status
	switch role {
	case rolePortal:
		st.listen = nil
	case roleBalancer:
		st.ejected = nil // outlier detection starts afresh
	}
	st.restarts++
	s.report(ctx, role+" restarted")
}

// listenerReady records where the Portal listens and what it could not open.
func (s *ServicePort) listenerReady(ctx actor.Context, m *messages.ListenerReady) {
	if s.added {
		s.added = false
	} else if slices.Equal(s.rec.status.listen, m.GetAddresses()) && slices.Equal(failureTexts(s.rec.status.failures), failureTexts(m.GetFailures())) {
		// A retry that failed as the last one did tells nothing new: past
		// the open-file limit, thousands of ports logged every retry.
		s.cfg.Log.Debug().Str("servicePort", s.rec.id).Msg("portal still failing, retrying")
		return
	}
	s.rec.status.listen = m.GetAddresses()
	s.rec.status.err, s.rec.status.failures = "", m.GetFailures()
	if len(m.GetFailures()) > 0 {
		s.rec.status.err = fmt.Sprint(failureTexts(m.GetFailures()))
		s.cfg.Log.Error().Str("servicePort", s.rec.id).Strs("errors", failureTexts(m.GetFailures())).Msg("cannot open portal, retrying")
	}
	s.report(ctx, "service port listening")
}

// ejections records the endpoints outlier detection skips, and logs what
// changed: an ejection (or a longer one after a failed probe) as a
// warning, a restored endpoint as information.
func (s *ServicePort) ejections(ctx actor.Context, m *messages.EndpointEjections) {
	was := map[string]*messages.EjectedEndpoint{}
	for _, e := range s.rec.status.ejected {
		was[e.GetEndpoint()] = e
	}
	id := s.rec.id
	for _, e := range m.GetEjected() {
		if old := was[e.GetEndpoint()]; old == nil || old.GetUntilUnixMilli() != e.GetUntilUnixMilli() {
			s.cfg.Log.Warn().Str("servicePort", id).Str("endpoint", e.GetEndpoint()).Int32("ejections", e.GetEjections()).
				Str("lastError", e.GetLastError()).Time("until", time.UnixMilli(e.GetUntilUnixMilli())).Msg("endpoint ejected: its dials keep failing")
		}
		delete(was, e.GetEndpoint())
	}
	for ep := range was {
		s.cfg.Log.Info().Str("servicePort", id).Str("endpoint", ep).Msg("endpoint restored: a dial succeeded, or it left the service")
	}
	s.rec.status.ejected = m.GetEjected()
	s.report(ctx, "endpoint ejections changed")
}

// update applies a new desired state from the Proxier and tells the
// children what changed. One older than the state applied is dropped: a
// restarted ServicePort read a newer one from the record.
func (s *ServicePort) update(ctx actor.Context, m *messages.UpsertServicePort) {
	if m.GetGeneration() < s.rec.applied.GetGeneration() {
		return
	}
	spChanged, epChanged := s.applyChange(m)
	if !spChanged && !epChanged {
		return
	}
	if spChanged {
		s.syncAffinity(ctx)
		s.tell(ctx, s.rec.portal.Load(), rolePortal)
	}
	s.tell(ctx, s.rec.endpoints.Load(), roleAffinity, roleBalancer, rolePortal)
	s.report(ctx, "service port updated")
}

// applyChange makes m the applied desired state and reports what changed.
func (s *ServicePort) applyChange(m *messages.UpsertServicePort) (spChanged, epChanged bool) {
	rec := s.rec
	prev := rec.applied
	// The Tracker's diff hands on what did not change as the message last
	// flushed, so identity says what changed: no second comparison.
	spChanged = prev.GetServicePort() != m.GetServicePort()
	epChanged = !watcher.SameEndpoints(prev.GetEndpoints(), m.GetEndpoints())
	rec.applied = m
	span, tc := s.cfg.childSpan(m.GetTrace(), spanServicePort, trace.WithAttributes(attrServicePort.String(rec.id),
		attrGeneration.Int64(m.GetGeneration()), attrEndpoints.Int(len(m.GetEndpoints())),
		attribute.Bool("kproxy.service_port_changed", spChanged), attribute.Bool("kproxy.endpoints_changed", epChanged)))
	defer span.End()
	if spChanged || epChanged {
		// What follows belongs to this change; a re-send that changes
		// nothing leaves the last one's.
		rec.trace = tc
	}
	s.apply(spChanged, spChanged || epChanged)
	return spChanged, epChanged
}

// apply stores in the record the children's configuration for the applied
// desired state: the Portal's when the service port changed, the endpoint
// set when it or the endpoints did.
func (s *ServicePort) apply(portalChanged, endpointsChanged bool) {
	if portalChanged {
		s.syncExternalPort()
		s.configurePortal()
	}
	if endpointsChanged {
		rec := s.rec
		sp := rec.applied.GetServicePort()
		rec.setEndpoints(&messages.SetEndpoints{
			Endpoints:              rec.applied.GetEndpoints(),
			ExternalScopeIsCluster: rec.externalIsCluster,
			SessionAffinity:        sp.GetSessionAffinity(),
			AffinityTimeoutSeconds: sp.GetAffinityTimeoutSeconds(),
			Trace:                  rec.trace,
		})
	}
}

// configurePortal stores the Portal's configuration, once the service port
// has its proxy port (or needs none).
func (s *ServicePort) configurePortal() {
	rec := s.rec
	if rec.portErr != nil {
		return
	}
	rec.configurePortal(&messages.ConfigurePortal{ServicePort: rec.applied.GetServicePort(),
		ProxyPort: int32(rec.proxyPort), ExternalProxyPort: int32(rec.extPort), Trace: rec.trace})
}

// tell sends msg to the children of roles that run.
func (s *ServicePort) tell(ctx actor.Context, msg proto.Message, roles ...string) {
	if msg == nil {
		return
	}
	for _, role := range roles {
		if pid := *s.children.of(role); pid != nil {
			ctx.Send(pid, msg)
		}
	}
}

// syncExternalPort gives the service port a second proxy port in kernel
// modes when a traffic policy is Local, so the two scopes can differ: rules
// send external traffic there, and the Portal serves it with the external
// endpoint scope. Once allocated it is kept, like the first.
func (s *ServicePort) syncExternalPort() {
	s.allocateExternalPort()
	rec := s.rec
	rec.externalIsCluster = steer.ClusterScopeOnExternalPort(rec.applied.GetServicePort(), s.cfg.PortalMode, rec.extPort)
}

func (s *ServicePort) allocateExternalPort() {
	rec := s.rec
	sp := rec.applied.GetServicePort()
	local := sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL ||
		sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	if rec.extPort != 0 || rec.proxyPort == 0 || s.cfg.Rules == nil || !local {
		return
	}
	network, _ := datapath.Network(sp.GetKey().GetProtocol()) // proxyPort != 0: supported
	if prev := s.cfg.RecoveredPorts[rec.id].External; s.cfg.Ports.Claim(network, prev) {
		rec.extPort = prev
		return
	}
	port, err := s.cfg.Ports.Allocate(network)
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("servicePort", rec.id).Msg("cannot allocate external proxy port; external traffic uses the cluster scope")
		return
	}
	rec.extPort = port
}

// syncAffinity starts the Affinity actor when the service has ClientIP
// affinity. Once started it is kept if affinity is turned off again (the
// Balancer just stops forwarding to it), which avoids racing a stopping
// actor for its name.
func (s *ServicePort) syncAffinity(ctx actor.Context) {
	if s.rec.applied.GetServicePort().GetSessionAffinity() != messages.SessionAffinity_CLIENT_IP || s.children.affinity != nil {
		return
	}
	if s.rec.pins == nil {
		s.rec.pins = balancer.NewScopedAffinity(0, nil)
	}
	s.spawn(ctx, roleAffinity)
}

// spawn starts a child, which reads its configuration from the record.
func (s *ServicePort) spawn(ctx actor.Context, role string) {
	pid, err := ctx.SpawnNamed(s.cfg.spawnProps(s.rec, role), role)
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("servicePort", s.rec.id).Str("actor", role).Msg("spawn failed")
		return
	}
	*s.children.of(role) = pid
}

// children are a ServicePort's running children, by role (fields, not a
// map: smaller per service port).
type children struct{ portal, balancer, affinity *actor.PID }

func (c *children) of(role string) **actor.PID {
	switch role {
	case rolePortal:
		return &c.portal
	case roleBalancer:
		return &c.balancer
	default:
		return &c.affinity
	}
}

// report logs where the service port listens and its endpoints, and tells
// the Proxier, which keeps the state view.
func (s *ServicePort) report(ctx actor.Context, event string) {
	rec := s.rec
	if rec.portErr != nil {
		rec.status.err = rec.portErr.Error()
		rec.status.failures = []*messages.Failure{failure(rec.portErr, messages.FailureCode_PROXY_PORT_UNAVAILABLE)}
	}
	st := rec.stateReport(ctx.Self().GetId())
	eps := make([]string, 0, len(st.Endpoints))
	for _, e := range st.Endpoints {
		eps = append(eps, e.Address())
	}
	s.cfg.Log.Info().Str("servicePort", rec.id).Strs("listen", st.ListenAddresses).
		Strs("endpoints", eps).Int32("proxyPort", st.ProxyPort).Msg(event)
	// Rules first: once the Proxier has every service port's report, the
	// Rules actor has their rules (DesiredStateComplete).
	s.syncRules(ctx)
	ctx.Request(ctx.Parent(), st) // Request: the Proxier checks the sender
}

// syncRules tells the Rules actor what this service port needs (its
// addresses to the proxy port, or rejects without endpoints) when what the
// rules are made of changed: an endpoint change ends here unless the first
// endpoint came or the last one went.
func (s *ServicePort) syncRules(ctx actor.Context) {
	rec := s.rec
	if s.cfg.rulesPID == nil || rec.proxyPort == 0 {
		return
	}
	in := &portalRulesInput{sp: rec.applied.GetServicePort(), proxyPort: rec.proxyPort, extPort: rec.extPort}
	in.internal, in.external = rules.Verdicts(rec.applied.GetEndpoints())
	if s.rulesSent != nil && *s.rulesSent == *in {
		return
	}
	s.rulesSent = in
	ctx.Send(s.cfg.rulesPID, &messages.SetPortalRules{ServicePort: in.sp, ProxyPort: int32(in.proxyPort),
		ExternalProxyPort: int32(in.extPort), Internal: in.internal, External: in.external, Trace: rec.trace})
}
