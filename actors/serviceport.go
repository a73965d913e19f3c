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
	"github.com/kproxy/kproxy/portal"
	"github.com/kproxy/kproxy/portal/rules"
)

// Child names under a ServicePort; siblings find each other by them.
const (
	rolePortal   = "portal"
	roleBalancer = "balancer"
	roleAffinity = "affinity"
	// roleServicePort is what a ServicePort says to the Proxier when it starts.
	roleServicePort = "serviceport"
)

// ServicePort supervises one service port's Portal, Balancer and Affinity.
// It holds the desired state (service port, endpoints, proxy port), so a
// restarted child rebuilds from it: every child sends ChildStarted when it
// (re)starts and gets its configuration back.
type ServicePort struct {
	cfg        *Config
	sp         *messages.ServicePort
	endpoints  []*messages.Endpoint
	generation int64
	proxyPort  int
	extPort    int // external proxy port (kernel modes, externalTrafficPolicy Local)
	portErr    error
	// portRetry is the wait before the next try to allocate the proxy port.
	portRetry time.Duration

	started map[string]bool // roles seen starting at least once
	// configSent holds the roles spawn sent their configuration to, so
	// their first ChildStarted needs no answer.
	configSent map[string]bool
	state      *messages.ServicePortState
	children   map[string]*actor.PID
	// Entries a restarting Affinity handed over, for its next incarnation.
	affinityEntries *messages.AffinityEntries
	// The portal rules last asked of the Rules actor (kernel modes).
	rulesSent *messages.SetPortalRules
	// snapshots is where the Balancer publishes its Snapshots; the sets
	// sent to it are versioned there (configFor). newSet is set while the
	// next set for the Balancer differs from the last one sent: only then
	// does its version advance, so a restart that changes nothing leaves
	// the Snapshot in use.
	snapshots *balancer.SnapshotHolder
	newSet    bool
	// trace is the last applied change's trace context (tracing only):
	// what children and Rules do for it joins that trace.
	trace *messages.TraceContext
}

func newServicePort(cfg *Config) actor.Producer {
	return func() actor.Actor { return &ServicePort{cfg: cfg} }
}

// Receive implements actor.Actor.
func (s *ServicePort) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.cfg.traceRestart(ctx)
		s.started, s.configSent = map[string]bool{}, map[string]bool{}
		s.children = map[string]*actor.PID{}
		s.state = &messages.ServicePortState{}
		s.snapshots = s.cfg.snapshotHolder(childID(ctx.Self().GetId(), roleBalancer))
		if pins, ok := s.cfg.pins.LoadAndDelete(ctx.Self().GetId()); ok {
			// This actor restarted: its Affinity saved its pins on the way down.
			s.affinityEntries = pins.(*messages.AffinityEntries)
		}
		// After a restart of this actor the Proxier re-sends the desired state.
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: roleServicePort})
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *actor.Restarting:
		// protoactor stops the children of a restarting actor; the Portal
		// keeps its sockets for its successor, so no connection is reset,
		// and the Affinity its pins.
		s.cfg.listeners.Hold(portalOwner(ctx))
		s.keepPins(ctx)
	case *actor.Stopping:
		if s.cfg.handover.Load() { // the Proxier restarts: the same, for the next ServicePort
			s.cfg.listeners.Hold(portalOwner(ctx))
			s.keepPins(ctx)
		}
	case *messages.AffinityEntries:
		s.affinityEntries = m
	case *actor.Stopped:
		s.stopped(ctx)
	case *messages.UpsertServicePort:
		s.upsert(ctx, m)
	case *messages.ChildStarted:
		s.childStarted(ctx, m.GetRole())
	case *messages.ListenerReady:
		s.listenerReady(ctx, m)
	case *messages.RetryProxyPort:
		s.allocate(ctx)
	case *messages.EndpointEjections:
		s.ejections(ctx, m)
	}
}

// keepPins saves the last pins this actor had for an Affinity: ones not
// yet passed on, or passed on to an Affinity that may not have taken them.
// An Affinity that has its pins saves them after this (children stop after
// their parent's Stopping), under the same key, so its fresher ones win.
func (s *ServicePort) keepPins(ctx actor.Context) {
	if s.affinityEntries != nil {
		s.cfg.pins.Store(ctx.Self().GetId(), s.affinityEntries)
	}
}

// stopped gives back what the service port held: sockets a hold kept,
// proxy ports, kernel rules.
func (s *ServicePort) stopped(ctx actor.Context) {
	if s.cfg.handover.Load() {
		return // the Proxier restarts: the next ServicePort takes all this over
	}
	s.cfg.pins.Delete(ctx.Self().GetId()) // the service port is gone, its pins with it
	s.cfg.listeners.CloseOwned(portalOwner(ctx))
	s.cfg.dropSnapshot(childID(ctx.Self().GetId(), roleBalancer))
	s.cfg.Stats.Delete(s.sp.GetKey().ID())
	network, _ := portal.Network(s.sp.GetKey().GetProtocol()) // ports exist only for supported ones
	for _, port := range []int{s.proxyPort, s.extPort} {
		if port != 0 {
			s.cfg.Ports.Release(network, port)
		}
	}
	if s.rulesSent != nil && !s.cfg.stopping.Load() {
		ctx.Send(s.cfg.rulesPID, &messages.DeletePortalRules{Key: s.sp.GetKey()})
	}
}

// scheduleAllocate retries the proxy port's allocation later, backing off
// from 100 ms to 10 s: ports free up as other service ports go.
func (s *ServicePort) scheduleAllocate(ctx actor.Context) {
	if errors.Is(s.portErr, portal.ErrUnsupportedProtocol) {
		return // no retry makes SCTP proxiable
	}
	s.portRetry = min(max(2*s.portRetry, 100*time.Millisecond), 10*time.Second)
	scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(s.portRetry, ctx.Self(), &messages.RetryProxyPort{})
}

// allocate retries the proxy port; once it has one, the Portal gets its
// configuration and the service port serves.
func (s *ServicePort) allocate(ctx actor.Context) {
	if s.portErr == nil {
		return
	}
	network, _ := portal.Network(s.sp.GetKey().GetProtocol())
	port, err := s.cfg.Ports.Allocate(network)
	if err != nil {
		s.portErr = err
		s.scheduleAllocate(ctx)
		return
	}
	s.proxyPort, s.portErr, s.portRetry = port, nil, 0
	s.state.Error, s.state.Failures = "", nil
	s.syncExternalPort()
	if pid := s.children[rolePortal]; pid != nil {
		ctx.Send(pid, s.configFor(rolePortal))
	}
	s.report(ctx, "proxy port allocated")
}

// childStarted answers a (re)started child with its configuration (and a
// restarted Affinity with the entries its predecessor saved). The first
// start of a Portal or Balancer needs no answer: spawn sent its
// configuration with it.
func (s *ServicePort) childStarted(ctx actor.Context, role string) {
	restarted := s.started[role]
	s.started[role] = true
	if !restarted && s.configSent[role] {
		return
	}
	if msg := s.childConfig(role); msg != nil {
		if restarted {
			setTrace(msg, nil) // a restart, not the last change
		}
		ctx.Respond(msg)
	}
	if !restarted {
		return
	}
	switch role {
	case rolePortal:
		s.state.ListenAddresses = nil // until the new incarnation reports
	case roleBalancer:
		s.state.Ejected = nil // outlier detection starts afresh
	}
	s.state.Restarts++
	s.report(ctx, role+" restarted")
}

// listenerReady records where the Portal listens and what it could not open.
func (s *ServicePort) listenerReady(ctx actor.Context, m *messages.ListenerReady) {
	if slices.Equal(s.state.ListenAddresses, m.GetAddresses()) && slices.Equal(failureTexts(s.state.Failures), failureTexts(m.GetFailures())) {
		// A retry that failed as the last one did tells nothing new: past
		// the open-file limit, thousands of ports logged every retry.
		s.cfg.Log.Debug().Str("servicePort", s.sp.GetKey().ID()).Msg("portal still failing, retrying")
		return
	}
	s.state.ListenAddresses = m.GetAddresses()
	s.state.Error, s.state.Failures = "", m.GetFailures()
	if len(m.GetFailures()) > 0 {
		s.state.Error = fmt.Sprint(failureTexts(m.GetFailures()))
		s.cfg.Log.Error().Str("servicePort", s.sp.GetKey().ID()).Strs("errors", failureTexts(m.GetFailures())).Msg("cannot open portal, retrying")
	}
	s.report(ctx, "service port listening")
}

// ejections records the endpoints outlier detection skips, and logs what
// changed: an ejection (or a longer one after a failed probe) as a
// warning, a restored endpoint as information.
func (s *ServicePort) ejections(ctx actor.Context, m *messages.EndpointEjections) {
	was := map[string]*messages.EjectedEndpoint{}
	for _, e := range s.state.Ejected {
		was[e.GetEndpoint()] = e
	}
	id := s.sp.GetKey().ID()
	for _, e := range m.GetEjected() {
		if old := was[e.GetEndpoint()]; old == nil || old.GetUntilUnixMilli() != e.GetUntilUnixMilli() {
			s.cfg.Log.Warn().Str("servicePort", id).Str("endpoint", e.GetEndpoint()).Int32("ejections", e.GetEjections()).
				Time("until", time.UnixMilli(e.GetUntilUnixMilli())).Msg("endpoint ejected: its dials keep failing")
		}
		delete(was, e.GetEndpoint())
	}
	for ep := range was {
		s.cfg.Log.Info().Str("servicePort", id).Str("endpoint", ep).Msg("endpoint restored: a dial succeeded, or it left the service")
	}
	s.state.Ejected = m.GetEjected()
	s.report(ctx, "endpoint ejections changed")
}

func (s *ServicePort) upsert(ctx actor.Context, m *messages.UpsertServicePort) {
	first := s.sp == nil
	spChanged := !proto.Equal(s.sp, m.GetServicePort())
	epChanged := first || !equalEndpoints(s.endpoints, m.GetEndpoints())
	s.sp, s.endpoints, s.generation = m.GetServicePort(), m.GetEndpoints(), m.GetGeneration()
	span, tc := s.cfg.childSpan(m.GetTrace(), spanServicePort, trace.WithAttributes(attrServicePort.String(s.sp.GetKey().ID()),
		attrGeneration.Int64(s.generation), attrEndpoints.Int(len(s.endpoints)), attribute.Bool("kproxy.new", first),
		attribute.Bool("kproxy.service_port_changed", spChanged), attribute.Bool("kproxy.endpoints_changed", epChanged)))
	defer span.End()
	if first || spChanged || epChanged {
		// What follows belongs to this change; a re-send that changes
		// nothing (the answer to ChildStarted) leaves the last one's.
		s.trace = tc
	}

	if first {
		s.newSet = !m.GetEndpointsSent()
		s.state.Restarts = m.GetRestarts() // a restarted ServicePort counts on
		network, err := portal.Network(s.sp.GetKey().GetProtocol())
		switch {
		case err != nil:
		case !portal.UsesProxyPorts(s.cfg.PortalMode):
			// The bind portal listens on the service addresses alone.
		case m.GetProxyPort() != 0:
			// Restarted: keep the ports kernel rules point at.
			s.proxyPort, s.extPort = int(m.GetProxyPort()), int(m.GetExternalProxyPort())
		case s.cfg.Ports.Claim(network, s.cfg.RecoveredPorts[s.sp.GetKey().ID()].Proxy):
			// A previous process's port, still ours to take: its rules stay right.
			s.proxyPort = s.cfg.RecoveredPorts[s.sp.GetKey().ID()].Proxy
		default:
			s.proxyPort, err = s.cfg.Ports.Allocate(network)
		}
		s.portErr = err
		if err != nil {
			s.cfg.Log.Error().Err(err).Str("servicePort", s.sp.GetKey().ID()).Msg("cannot allocate proxy port, retrying")
			s.scheduleAllocate(ctx)
		}
		s.syncExternalPort()
		s.spawn(ctx, roleBalancer)
		s.syncAffinity(ctx)
		s.spawn(ctx, rolePortal)
		s.report(ctx, "service port added")
		return // children ask for their configuration when they start
	}
	if !spChanged && !epChanged {
		return
	}
	if spChanged {
		s.syncAffinity(ctx)
		s.syncExternalPort()
		if msg := s.configFor(rolePortal); msg != nil {
			ctx.Send(s.children[rolePortal], msg)
		}
	}
	s.newSet = true
	set := s.configFor(roleBalancer)
	for _, role := range []string{roleBalancer, roleAffinity, rolePortal} {
		if pid := s.children[role]; pid != nil {
			ctx.Send(pid, set)
		}
	}
	s.report(ctx, "service port updated")
}

// portalOwner is the Portal's key in the listener registry: its PID id,
// the same for every incarnation.
func portalOwner(ctx actor.Context) string { return childID(ctx.Self().GetId(), rolePortal) }

// syncExternalPort gives the service port a second proxy port in kernel
// modes when a traffic policy is Local, so the two scopes can differ: rules
// send external traffic there, and the Portal serves it with the external
// endpoint scope. Once allocated it is kept, like the first.
func (s *ServicePort) syncExternalPort() {
	local := s.sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL ||
		s.sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	if s.extPort != 0 || s.proxyPort == 0 || s.cfg.Rules == nil || !local {
		return
	}
	network, _ := portal.Network(s.sp.GetKey().GetProtocol()) // proxyPort != 0: supported
	if prev := s.cfg.RecoveredPorts[s.sp.GetKey().ID()].External; s.cfg.Ports.Claim(network, prev) {
		s.extPort = prev
		return
	}
	port, err := s.cfg.Ports.Allocate(network)
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("servicePort", s.sp.GetKey().ID()).Msg("cannot allocate external proxy port; external traffic uses the cluster scope")
		return
	}
	s.extPort = port
}

// syncAffinity starts the Affinity actor the first time ClientIP affinity
// is on. It is kept if affinity is turned off again (the Balancer just stops
// forwarding to it), which avoids racing a stopping actor for its name.
func (s *ServicePort) syncAffinity(ctx actor.Context) {
	if s.sp.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP && s.children[roleAffinity] == nil {
		s.spawn(ctx, roleAffinity)
	}
}

// spawn starts a child. Without ClientIP affinity it gets its
// configuration at once, behind its Started: no round trip through
// ChildStarted (three messages per child, 20,000 for 10,000 service
// ports). With affinity, children still ask, in the order they start, so
// the Balancer is not configured (and forwarding lookups) before the
// Affinity has the pins a predecessor saved.
func (s *ServicePort) spawn(ctx actor.Context, role string) {
	pid, err := ctx.SpawnNamed(s.cfg.props[role], role)
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("servicePort", s.sp.GetKey().ID()).Str("actor", role).Msg("spawn failed")
		return
	}
	s.children[role] = pid
	if s.sp.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP {
		return
	}
	if msg := s.configFor(role); msg != nil {
		ctx.Send(pid, msg)
		s.configSent[role] = true
	}
}

// childConfig is configFor, with the entries a restarted Affinity's
// predecessor saved for an Affinity. The copy is kept: an Affinity
// stopped (its system message jumps the queue) before it took this
// SetEndpoints saves no pins, and these would be lost. One that took them
// saves its own after this actor's keepPins, so the fresher ones win.
func (s *ServicePort) childConfig(role string) proto.Message {
	msg := s.configFor(role)
	if set, ok := msg.(*messages.SetEndpoints); ok && role == roleAffinity && s.affinityEntries != nil {
		set.AffinityEntries = s.affinityEntries
	}
	return msg
}

// configFor is what a child of the role needs to (re)build its state.
func (s *ServicePort) configFor(role string) proto.Message {
	if s.sp == nil {
		return nil
	}
	switch role {
	case rolePortal:
		if s.portErr != nil {
			return nil
		}
		return &messages.ConfigurePortal{ServicePort: s.sp, ProxyPort: int32(s.proxyPort), ExternalProxyPort: int32(s.extPort), Trace: s.trace}
	default:
		set := &messages.SetEndpoints{
			Endpoints:              portal.BalancerEndpoints(s.sp, s.cfg.PortalMode, s.extPort, s.endpoints),
			SessionAffinity:        s.sp.GetSessionAffinity(),
			AffinityTimeoutSeconds: s.sp.GetAffinityTimeoutSeconds(),
			Trace:                  s.trace,
		}
		if role == roleBalancer {
			set.Version = s.snapshots.Want()
			if s.newSet {
				set.Version, s.newSet = s.snapshots.Expect(), false
			}
		}
		return set
	}
}

// report logs where the service port listens and its endpoints, and tells
// the Proxier, which keeps the state view.
func (s *ServicePort) report(ctx actor.Context, event string) {
	st := s.state
	st.Key, st.ServicePort, st.Endpoints, st.Generation = s.sp.GetKey(), s.sp, s.endpoints, s.generation
	st.ProxyPort, st.ExternalProxyPort = int32(s.proxyPort), int32(s.extPort)
	st.ActorId = ctx.Self().GetId()
	if s.portErr != nil {
		st.Error = s.portErr.Error()
		st.Failures = []*messages.Failure{failure(s.portErr, messages.FailureCode_PROXY_PORT_UNAVAILABLE)}
	}
	eps := make([]string, 0, len(s.endpoints))
	for _, e := range s.endpoints {
		eps = append(eps, e.Address())
	}
	s.cfg.Log.Info().Str("servicePort", st.Key.ID()).Strs("listen", st.ListenAddresses).
		Strs("endpoints", eps).Int32("proxyPort", st.ProxyPort).Msg(event)
	// Rules first: once the Proxier has every service port's report, the
	// Rules actor has their rules (DesiredStateComplete).
	s.syncRules(ctx)
	ctx.Request(ctx.Parent(), stateCopy(st)) // Request: the Proxier checks the sender
}

// stateCopy copies the state's fields for the Proxier, which keeps it: a
// shallow copy, since this actor only ever replaces those fields (the
// service port, endpoints, addresses and failures are never changed in
// place). A deep copy (proto.CloneOf) of every report held a second copy
// of each service port and its endpoints: 1.4 KiB per service port.
func stateCopy(st *messages.ServicePortState) *messages.ServicePortState {
	return &messages.ServicePortState{
		Key: st.Key, ServicePort: st.ServicePort, Endpoints: st.Endpoints, ListenAddresses: st.ListenAddresses,
		ProxyPort: st.ProxyPort, Restarts: st.Restarts, Error: st.Error, Generation: st.Generation, Deleted: st.Deleted,
		ActorId: st.ActorId, ExternalProxyPort: st.ExternalProxyPort, Failures: st.Failures, Ejected: st.Ejected,
	}
}

// syncRules tells the Rules actor what this service port needs, when that
// changed: its addresses to the proxy port, or rejects without endpoints.
func (s *ServicePort) syncRules(ctx actor.Context) {
	if s.cfg.rulesPID == nil || s.proxyPort == 0 {
		return
	}
	internal, external := rules.Verdicts(s.endpoints)
	want := &messages.SetPortalRules{ServicePort: s.sp, ProxyPort: int32(s.proxyPort), ExternalProxyPort: int32(s.extPort),
		Reject: internal == rules.RejectAll, RejectExternal: external == rules.RejectAll,
		Drop: internal == rules.DropAll, DropExternal: external == rules.DropAll}
	if proto.Equal(want, s.rulesSent) {
		return
	}
	s.rulesSent = want
	if s.trace != nil {
		want = proto.CloneOf(want)
		want.Trace = s.trace // not part of what is compared
	}
	ctx.Send(s.cfg.rulesPID, want)
}

// setTrace sets the trace context of a child's configuration message.
func setTrace(msg proto.Message, tc *messages.TraceContext) {
	switch m := msg.(type) {
	case *messages.ConfigurePortal:
		m.Trace = tc
	case *messages.SetEndpoints:
		m.Trace = tc
	}
}

func equalEndpoints(a, b []*messages.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *messages.Endpoint) bool { return proto.Equal(x, y) })
}
