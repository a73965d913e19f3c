package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// incarnations numbers Portal incarnations process-wide, so a failure
// reported by a goroutine of an earlier incarnation (the PID survives a
// restart) is recognised as stale and dropped.
var incarnations atomic.Int64

// Portal serves a service port's listeners. It never blocks in Receive:
// each listener is served by its own goroutine, which reports failure back
// as a ListenerFailed message; the Portal then panics so its supervisor
// restarts it. The sockets are the service port's record's, handed to
// every incarnation with it: a Portal going away
// pauses their serving goroutines and the next incarnation resumes them,
// so queued connections wait in the kernel backlog instead of being
// reset, and UDP flows live on. Only the socket that failed is closed and
// reopened; the proxy port stays, so kernel rules pointing at it stay valid.
type Portal struct {
	cfg         *Config
	rec         *record
	incarnation int64
	version     int64 // of the configuration applied
	sp          *messages.ServicePort
	proxyPort   int
	extPort     int // second proxy port for external traffic, or 0
	epVersion   int64
	serving     served // by this incarnation
	// servedPP is the PROXY protocol version p.serving was served with: a
	// change serves the same sockets again with the new one.
	servedPP messages.ProxyProtocol
	// servedTransparent: p.serving were served dialing node-local
	// endpoints from the client's address.
	servedTransparent bool
	failed            map[string]error // could not be opened; retried with backoff
	broken            string           // address whose failure crashed this incarnation
	retryDelay        time.Duration
	cancelRetry       scheduler.CancelFunc
	picker            datapath.Picker
	// firstAccept ends the restart-to-serving span of an incarnation
	// started after a crash (tracing only).
	firstAccept func()
}

// Receive implements actor.Actor.
func (p *Portal) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.started(ctx)
	case *actor.Restarting:
		p.restarting()
		ctx.Send(ctx.Parent(), &messages.ChildRestarted{Role: rolePortal})
	case *actor.Stopping:
		p.stopping()
	case *messages.ConfigurePortal:
		p.configure(ctx, m)
	case *messages.RetryListen:
		if m.GetIncarnation() == p.incarnation {
			p.cancelRetry = nil
			p.reconcile(ctx)
		}
	case *messages.SetEndpoints:
		p.setEndpoints(m)
	case *messages.GetState:
		ctx.Respond(p.ready())
	case *messages.ListenerFailed:
		p.listenerFailed(m)
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	}
}

// started serves the record's sockets with the record's configuration (a
// service port still waiting for its proxy port has none yet).
func (p *Portal) started(ctx actor.Context) {
	p.incarnation = incarnations.Add(1)
	p.serving = nil
	p.firstAccept = p.cfg.firstAccept(p.cfg.traceRestart(ctx))
	p.picker = &balancerPicker{root: ctx.ActorSystem().Root, pid: siblingPID(ctx, roleBalancer), timeout: p.cfg.PickTimeout, snapshot: &p.rec.snapshots, local: p.rec.isLocal}
	p.configure(ctx, p.rec.portal.Load())
	p.setEndpoints(p.rec.endpoints.Load())
}

// configure applies a configuration newer than the one applied: a
// ConfigurePortal, or on start the record's latest.
func (p *Portal) configure(ctx actor.Context, m *messages.ConfigurePortal) {
	if m == nil || m.GetVersion() <= p.version {
		return
	}
	span, _ := p.cfg.childSpan(m.GetTrace(), spanConfigure, trace.WithAttributes(attrServicePort.String(m.GetServicePort().GetKey().ID()),
		attribute.Int("kproxy.proxy_port", int(m.GetProxyPort()))))
	defer span.End()
	p.version = m.GetVersion()
	p.sp = m.GetServicePort()
	p.proxyPort = int(m.GetProxyPort())
	p.extPort = int(m.GetExternalProxyPort())
	p.retryDelay = 0
	p.warnTransparent()
	ready := p.reconcile(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.StringSlice("kproxy.listen", ready.GetAddresses()), attribute.Int("kproxy.failures", len(ready.GetFailures())))
		if len(ready.GetFailures()) > 0 {
			span.SetStatus(codes.Error, ready.GetFailures()[0].GetMessage())
		}
	}
}

// restarting pauses the serving goroutines for the next incarnation; only
// the socket that failed is closed.
func (p *Portal) restarting() {
	p.stopRetry()
	for _, l := range p.serving {
		if addr := l.Spec.Address; addr == p.broken {
			l.Close()
			p.rec.sockets.Forget(addr)
			continue
		}
		l.Pause()
	}
}

// stopping pauses the serving goroutines: the sockets are the record's,
// for the next Portal (the ServicePort or the Proxier restarts), or closed
// by the ServicePort when the service port is deleted.
func (p *Portal) stopping() {
	p.stopRetry()
	for _, l := range p.serving {
		l.Pause()
	}
}

// setEndpoints ends UDP flows to endpoints that are gone, for a set newer
// than the one applied.
func (p *Portal) setEndpoints(m *messages.SetEndpoints) {
	if m == nil || m.GetVersion() <= p.epVersion {
		return
	}
	p.epVersion = m.GetVersion()
	keep := map[string]bool{}
	for _, e := range m.GetEndpoints() {
		keep[e.Address()] = true
	}
	for _, l := range p.serving {
		l.RetainEndpoints(func(ep string) bool { return keep[ep] })
	}
}

// listenerFailed crashes the Portal for a socket that broke under a
// serving goroutine, so supervision replaces it; stale reports are dropped.
func (p *Portal) listenerFailed(m *messages.ListenerFailed) {
	if m.GetIncarnation() != p.incarnation || p.serving.get(m.GetAddress()) == nil {
		return // from an earlier incarnation or a listener we closed
	}
	p.broken = m.GetAddress()
	panic(fmt.Errorf("listener %s failed: %s", m.GetAddress(), m.GetFailure().GetMessage()))
}

// reconcile serves the listeners the configuration wants and closes the
// rest, and tells the ServicePort (the returned report).
func (p *Portal) reconcile(ctx actor.Context) *messages.ListenerReady {
	specs, specErr := datapath.ListenSpecs(p.sp, p.cfg.PortalMode, p.cfg.BindAddress, p.proxyPort, p.extPort)
	p.failed = nil
	if specErr != nil {
		p.fail(p.sp.GetKey().GetProtocol().String(), specErr)
	}
	if pp, tp := p.sp.GetProxyProtocol(), p.transparent(); pp != p.servedPP || tp != p.servedTransparent {
		// Serve replaces the serving goroutine and keeps the socket: no
		// queued connection is lost, new ones get the new options.
		for _, l := range p.serving {
			l.Serve(p.listenerOptions(ctx))
		}
		p.servedPP, p.servedTransparent = pp, tp
	}
	want := map[string]bool{}
	for _, spec := range specs {
		want[spec.Address] = true
		l := p.rec.sockets.Get(spec.Address)
		if l != nil && l.Spec != spec {
			l.Close()
			p.rec.sockets.Forget(spec.Address)
			p.serving.remove(spec.Address)
			l = nil
		}
		if l == nil {
			var err error
			if l, err = p.rec.sockets.Open(spec); err != nil {
				p.fail(spec.Address, err)
				continue
			}
		}
		if p.serving.get(spec.Address) == nil {
			l.Serve(p.listenerOptions(ctx))
			p.serving = append(p.serving, l)
		}
	}
	for _, l := range p.rec.sockets.All() {
		if addr := l.Spec.Address; !want[addr] {
			l.Close()
			l.CloseFlows()
			p.rec.sockets.Forget(addr)
			p.serving.remove(addr)
		}
	}
	ready := p.ready()
	ctx.Send(ctx.Parent(), ready)
	p.scheduleRetry(ctx, specErr)
	return ready
}

// fail records that addr could not be opened (the map is made on the
// first failure: most Portals never have one).
func (p *Portal) fail(addr string, err error) {
	if p.failed == nil {
		p.failed = map[string]error{}
	}
	p.failed[addr] = err
}

// served are the listeners a Portal serves, one or two per service port:
// a slice rather than a map by address, smaller per service port.
type served []*datapath.Listener

func (s served) get(addr string) *datapath.Listener {
	for _, l := range s {
		if l.Spec.Address == addr {
			return l
		}
	}
	return nil
}

func (s *served) remove(addr string) {
	*s = slices.DeleteFunc(*s, func(l *datapath.Listener) bool { return l.Spec.Address == addr })
}

// ready describes the served listeners and the failed ones.
func (p *Portal) ready() *messages.ListenerReady {
	ready := &messages.ListenerReady{Incarnation: p.incarnation}
	for _, l := range p.serving {
		ready.Addresses = append(ready.Addresses, l.Spec.Address)
	}
	slices.Sort(ready.Addresses)
	for _, err := range p.failed {
		ready.Failures = append(ready.Failures, failure(err, messages.FailureCode_FAILURE_CODE_UNKNOWN))
	}
	slices.SortFunc(ready.Failures, func(a, b *messages.Failure) int { return strings.Compare(a.GetMessage(), b.GetMessage()) })
	return ready
}

// scheduleRetry retries failed listeners with capped exponential backoff
// and jitter, so a port held by another process is picked up once it frees
// without spinning. An unsupported protocol is never retried.
func (p *Portal) scheduleRetry(ctx actor.Context, specErr error) {
	p.stopRetry()
	if len(p.failed) == 0 || errors.Is(specErr, datapath.ErrUnsupportedProtocol) {
		return
	}
	switch {
	case p.retryDelay == 0:
		p.retryDelay = 100 * time.Millisecond
	case p.retryDelay < 10*time.Second:
		p.retryDelay *= 2
	}
	delay := p.retryDelay/2 + rand.N(p.retryDelay/2+1)
	p.cancelRetry = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).
		SendOnce(delay, ctx.Self(), &messages.RetryListen{Incarnation: p.incarnation})
}

func (p *Portal) stopRetry() {
	if p.cancelRetry != nil {
		p.cancelRetry()
		p.cancelRetry = nil
	}
}

func (p *Portal) listenerOptions(ctx actor.Context) datapath.ListenerOptions {
	self, root, inc := ctx.Self(), ctx.ActorSystem().Root, p.incarnation
	return datapath.ListenerOptions{
		Picker:         p.picker,
		Stats:          p.cfg.Stats.For(p.rec.id), // the record's ID string, not one more per listener
		Limits:         p.cfg.Limits,
		TCPKeepAlive:   p.cfg.TCPKeepAlive,
		Reaper:         p.cfg.Reaper,
		UDPIdleTimeout: p.cfg.UDPIdleTimeout,
		Conns:          p.cfg.conns,
		Faults:         p.cfg.Faults,
		Tracer:         p.cfg.Tracer,
		ServicePort:    p.rec.id,
		ProxyProtocol:  int(p.sp.GetProxyProtocol()),
		Transparent:    p.transparent(),
		PodClients:     p.cfg.PodClients,
		EventLoops:     p.cfg.TCPEventLoops,
		OnFirstAccept:  p.firstAccept,
		Log:            &p.cfg.Log, // shared; the data path names the service port and listener on its events
		OnFailure: func(spec datapath.ListenSpec, err error) {
			root.Send(self, &messages.ListenerFailed{Incarnation: inc, Address: spec.Address, Failure: failure(err, messages.FailureCode_FAILURE_CODE_UNKNOWN)})
		},
	}
}

// balancerPicker picks from the Snapshot the service port's Balancer
// publishes, and asks the Balancer actor when there is none (ClientIP
// affinity, or the Balancer not configured yet). It runs on connection
// goroutines, never inside Receive.
//
// A request to the actor is the one part of a connection's cost that
// grows with the actors' load: a future, a message each way, a mailbox
// wake-up and two goroutine switches per connection. Reading the Snapshot
// is an atomic load and a counter increment.
type balancerPicker struct {
	root     *actor.RootContext
	pid      *actor.PID
	timeout  time.Duration
	snapshot *balancer.SnapshotHolder
	// local says whether an endpoint is on this node (record.isLocal).
	local func(endpoint string) bool
}

// While the Balancer is being replaced (its ServicePort restarting) its PID
// has no actor for a moment: a request comes back as a dead letter, or is
// dropped with the stopping actor's mailbox. The picker asks again, with
// short attempts, until its timeout rather than reset the connection.
func (b *balancerPicker) Pick(clientIP string, exclude []string, external bool) (datapath.Pick, error) {
	if snap := b.snapshot.Load(); snap != nil {
		ep, report, ok := snap.Pick(external, clientIP, exclude)
		if !ok {
			return datapath.Pick{}, datapath.ErrNoEndpoints
		}
		return datapath.Pick{Endpoint: ep, Report: report, Local: b.isLocal(ep)}, nil
	}
	deadline := time.Now().Add(b.timeout)
	for {
		attempt := min(pickAttemptTimeout, time.Until(deadline))
		res, err := b.root.RequestFuture(b.pid, &messages.PickEndpoint{ClientIp: clientIP, Exclude: exclude, External: external}, attempt).Result()
		switch {
		case err == nil:
			if picked, ok := res.(*messages.Picked); ok && picked.GetAddress() != "" {
				return datapath.Pick{Endpoint: picked.GetAddress(), Report: picked.GetReport(), AffinityHit: picked.GetAffinityHit(), Local: b.isLocal(picked.GetAddress())}, nil
			}
			return datapath.Pick{}, datapath.ErrNoEndpoints
		case !errors.Is(err, actor.ErrDeadLetter) && !errors.Is(err, actor.ErrTimeout):
			return datapath.Pick{}, fmt.Errorf("ask balancer: %w", err)
		case time.Until(deadline) < 5*time.Millisecond:
			return datapath.Pick{}, fmt.Errorf("ask balancer: %w", err)
		case errors.Is(err, actor.ErrDeadLetter):
			time.Sleep(5 * time.Millisecond) // on the connection's goroutine, not an actor's
		}
	}
}

// CanPickNow: a published Snapshot answers without the actor.
func (b *balancerPicker) CanPickNow() bool { return b.snapshot.Load() != nil }

func (b *balancerPicker) isLocal(endpoint string) bool { return b.local != nil && b.local(endpoint) }

// Dialed tells the Balancer (outlier detection). A report lost while the
// Balancer restarts only delays an ejection.
func (b *balancerPicker) Dialed(endpoint string, err error) {
	b.root.Send(b.pid, dialOutcome(endpoint, err))
}

// dialOutcome is a dial's outcome for outlier detection, which tells a
// timeout from a refusal.
func dialOutcome(endpoint string, err error) *messages.DialOutcome {
	if err == nil {
		return &messages.DialOutcome{Endpoint: endpoint}
	}
	return &messages.DialOutcome{Endpoint: endpoint, Failed: true, TimedOut: datapath.IsTimeout(err), Error: err.Error()}
}

// pickAttemptTimeout bounds one request to the Balancer; a lost request is
// retried instead of stalling the connection for the whole PickTimeout.
const pickAttemptTimeout = 250 * time.Millisecond
