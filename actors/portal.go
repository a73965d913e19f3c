package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
)

// incarnations numbers Portal incarnations process-wide, so a failure
// reported by a goroutine of an earlier incarnation (the PID survives a
// restart) is recognised as stale and dropped.
var incarnations atomic.Int64

// Portal owns a service port's listeners. It never blocks in Receive: each
// listener is served by its own goroutine, which reports failure back as a
// ListenerFailed message; the Portal then panics so its supervisor restarts
// it, and the new incarnation reopens the same addresses (the proxy port is
// kept by the supervisor).
type Portal struct {
	cfg         *Config
	incarnation int64
	sp          *messages.ServicePort
	proxyPort   int
	endpoints   map[string]bool
	listeners   map[string]*portal.Listener // by address
	failed      map[string]error            // specs that could not be opened, retried with backoff
	retryDelay  time.Duration
	cancelRetry scheduler.CancelFunc
	picker      portal.Picker
}

func newPortal(cfg *Config) actor.Producer {
	return func() actor.Actor { return &Portal{cfg: cfg} }
}

// Receive implements actor.Actor.
func (p *Portal) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.incarnation = incarnations.Add(1)
		p.listeners = map[string]*portal.Listener{}
		p.picker = &balancerPicker{root: ctx.ActorSystem().Root, pid: siblingPID(ctx, roleBalancer), timeout: p.cfg.PickTimeout}
		ctx.Request(ctx.Parent(), &messages.ChildStarted{Role: rolePortal})
	case *actor.Restarting:
		p.closeListeners(false)
	case *actor.Stopping:
		p.closeListeners(true)
	case *messages.ConfigurePortal:
		p.sp = m.GetServicePort()
		p.proxyPort = int(m.GetProxyPort())
		p.retryDelay = 0
		p.reconcile(ctx)
	case *messages.RetryListen:
		if m.GetIncarnation() == p.incarnation {
			p.cancelRetry = nil
			p.reconcile(ctx)
		}
	case *messages.SetEndpoints:
		p.endpoints = map[string]bool{}
		for _, e := range m.GetEndpoints() {
			p.endpoints[e.Address()] = true
		}
		for _, l := range p.listeners {
			l.RetainEndpoints(func(ep string) bool { return p.endpoints[ep] })
		}
	case *messages.GetState:
		ctx.Respond(p.ready())
	case *messages.ListenerFailed:
		if m.GetIncarnation() != p.incarnation || p.listeners[m.GetAddress()] == nil {
			return // stale: from an earlier incarnation or a listener we closed
		}
		panic(fmt.Errorf("listener %s failed: %s", m.GetAddress(), m.GetError()))
	}
}

// reconcile opens the listeners the configuration wants and closes the rest.
func (p *Portal) reconcile(ctx actor.Context) {
	specs, err := portal.ListenSpecs(p.sp, p.cfg.PortalMode, p.cfg.BindAddress, p.proxyPort)
	p.failed = map[string]error{}
	if err != nil {
		p.failed[p.sp.GetKey().GetProtocol().String()] = err
	}
	want := map[string]bool{}
	for _, spec := range specs {
		want[spec.Address] = true
		if l := p.listeners[spec.Address]; l != nil && l.Spec == spec {
			continue
		} else if l != nil {
			l.Close()
		}
		l, err := portal.Open(spec, p.listenerOptions(ctx))
		if err != nil {
			p.failed[spec.Address] = err
			delete(p.listeners, spec.Address)
			continue
		}
		p.listeners[spec.Address] = l
	}
	for addr, l := range p.listeners {
		if !want[addr] {
			l.Close()
			l.CloseFlows()
			delete(p.listeners, addr)
		}
	}
	ctx.Send(ctx.Parent(), p.ready())
	p.scheduleRetry(ctx, err)
}

// ready describes the open listeners and the failed ones.
func (p *Portal) ready() *messages.ListenerReady {
	ready := &messages.ListenerReady{Incarnation: p.incarnation}
	for addr := range p.listeners {
		ready.Addresses = append(ready.Addresses, addr)
	}
	slices.Sort(ready.Addresses)
	for _, err := range p.failed {
		ready.Errors = append(ready.Errors, err.Error())
	}
	slices.Sort(ready.Errors)
	return ready
}

// scheduleRetry retries failed listeners with capped exponential backoff
// and jitter, so a port held by another process is picked up once it frees
// without spinning. An unsupported protocol is never retried.
func (p *Portal) scheduleRetry(ctx actor.Context, specErr error) {
	if p.cancelRetry != nil {
		p.cancelRetry()
		p.cancelRetry = nil
	}
	if len(p.failed) == 0 || errors.Is(specErr, portal.ErrUnsupportedProtocol) {
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

func (p *Portal) listenerOptions(ctx actor.Context) portal.ListenerOptions {
	self, root, inc := ctx.Self(), ctx.ActorSystem().Root, p.incarnation
	return portal.ListenerOptions{
		Picker:         p.picker,
		UDPIdleTimeout: p.cfg.UDPIdleTimeout,
		Conns:          p.cfg.conns,
		Log:            p.cfg.Log.With().Str("servicePort", p.sp.GetKey().ID()).Logger(),
		OnFailure: func(spec portal.ListenSpec, err error) {
			root.Send(self, &messages.ListenerFailed{Incarnation: inc, Address: spec.Address, Error: fmt.Sprint(err)})
		},
	}
}

// closeListeners closes every socket. Established connections and UDP flows
// live on unless the service port itself goes away (flows=true).
func (p *Portal) closeListeners(flows bool) {
	if p.cancelRetry != nil {
		p.cancelRetry()
	}
	for addr, l := range p.listeners {
		l.Close()
		if flows {
			l.CloseFlows()
		}
		delete(p.listeners, addr)
	}
}

// balancerPicker asks the service port's Balancer actor for an endpoint. It
// runs on connection goroutines, never inside Receive.
type balancerPicker struct {
	root    *actor.RootContext
	pid     *actor.PID
	timeout time.Duration
}

func (b *balancerPicker) Pick(clientIP string, exclude []string, external bool) (string, error) {
	res, err := b.root.RequestFuture(b.pid, &messages.PickEndpoint{ClientIp: clientIP, Exclude: exclude, External: external}, b.timeout).Result()
	if err != nil {
		return "", fmt.Errorf("ask balancer: %w", err)
	}
	picked, ok := res.(*messages.Picked)
	if !ok || picked.GetAddress() == "" {
		return "", portal.ErrNoEndpoints
	}
	return picked.GetAddress(), nil
}
