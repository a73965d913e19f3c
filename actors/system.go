package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/kproxy/kproxy/actors/actorlog"
	"github.com/kproxy/kproxy/actors/supervision"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// Proxy is a running actor tree.
type Proxy struct {
	System  *actor.ActorSystem
	Proxier *actor.PID
	Watcher *actor.PID
	// RulesPID is the Rules actor (kernel portal modes only).
	RulesPID *actor.PID
	Conns    *datapath.ConnTracker
	// Listeners holds every open socket (tests count them for leaks).
	Listeners *datapath.Listeners

	cfg     *Config
	desired *desiredState // the Proxier's; read here only once it stopped
	// supervisor is the top actors' parent.
	supervisor *actor.PID
	sub        *eventstream.Subscription
	restarts   atomic.Int64
}

// Start builds the actor system and the tree.
func Start(cfg Config) *Proxy {
	cfg.defaults()
	cfg.conns = datapath.NewConnTracker()
	cfg.listeners = datapath.NewListeners()
	cfg.listeners.SetFDLimit(cfg.FDLimit)
	if cfg.Keeper != nil {
		cfg.listeners.SetKeeper(cfg.Keeper) // before any socket opens: kept ones are taken back
	}
	// With the bind portal every port of the first state opens before
	// any serves (the kernel queues what comes meanwhile); the Proxier
	// starts serving when the last one reported. The kernel modes need no
	// hold: their first rules wait for that moment anyway, and after a
	// restart the rules left in place bring traffic to each proxy port
	// best served as soon as it opens.
	if !datapath.UsesProxyPorts(cfg.PortalMode) {
		cfg.listeners.HoldServing()
	}
	cfg.Ports.Attach(cfg.listeners, cfg.PortalMode) // proxy ports are held as the sockets the Portals serve
	cfg.crashes = &sync.Map{}
	c := &cfg
	opts := []actor.ConfigOption{actorlog.Option(cfg.Log)}
	if cfg.MeterProvider != nil {
		// WithMetricProviders alone leaves protoactor's metrics disabled.
		opts = append(opts, actor.WithMetricProviders(cfg.MeterProvider), func(c *actor.Config) { c.MetricsEnabled = true })
	}
	system := actor.NewActorSystem(opts...)
	p := &Proxy{System: system, Conns: cfg.conns, Listeners: cfg.listeners, cfg: c}
	// protoactor logs panics at INFO without the reason's detail; log and
	// count them here.
	p.sub = system.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok {
			p.restarts.Add(1)
			c.traceFailure(e)
			cfg.Metrics.Restarted(roleOf(e.Child.GetId()))
			cfg.Log.Warn().Str("actor", e.Child.GetId()).Str("reason", fmt.Sprint(e.Reason)).
				Str("directive", e.Directive.String()).Msg("actor failed")
		}
	})
	if c.Rules != nil {
		c.rulesPID = actor.NewPID(system.Address(), supervisorName+"/"+roleRules)
	}
	p.desired = &desiredState{records: map[string]*record{}}
	sup, _ := system.Root.SpawnNamed(newSupervisor(c, p.desired).Configure(actor.WithGuardian(supervision.Default)), supervisorName)
	res, err := system.Root.RequestFuture(sup, &messages.GetTopActors{}, time.Minute).Result()
	if err != nil {
		panic(fmt.Errorf("start the actor tree: %w", err)) // the supervisor answers from its mailbox: only a bug gets here
	}
	top := res.(*messages.TopActors)
	p.Proxier, p.Watcher = actor.NewPID(system.Address(), top.GetProxier()), actor.NewPID(system.Address(), top.GetWatcher())
	if top.GetRules() != "" {
		p.RulesPID = c.rulesPID
	}
	p.supervisor = sup
	return p
}

// SourceSynced tells the Watcher that the incremental source's caches are
// complete; nothing is programmed before.
func (p *Proxy) SourceSynced() { p.System.Root.Send(p.Watcher, &messages.SourceSynced{}) }

// WatcherStats returns the Watcher's event and change counts.
func (p *Proxy) WatcherStats() (*messages.WatcherStats, error) {
	res, err := p.System.Root.RequestFuture(p.Watcher, &messages.GetWatcherStats{}, 5*time.Second).Result()
	if err != nil {
		return nil, fmt.Errorf("watcher stats: %w", err)
	}
	return res.(*messages.WatcherStats), nil
}

// State returns the state of every service port.
func (p *Proxy) State(timeout time.Duration) (*messages.StateSnapshot, error) {
	res, err := p.System.Root.RequestFuture(p.Proxier, &messages.GetState{}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("get state: %w", err)
	}
	return res.(*messages.StateSnapshot), nil
}

// Subscribe calls fn with every ServicePortState the Proxier records
// (including deletions). fn runs on the publisher's goroutine: keep it short.
func (p *Proxy) Subscribe(fn func(*messages.ServicePortState)) (unsubscribe func()) {
	sub := p.System.EventStream.Subscribe(func(evt any) {
		if st, ok := evt.(*messages.ServicePortState); ok {
			fn(st)
		}
	})
	return func() { p.System.EventStream.Unsubscribe(sub) }
}

// StopOptions say how a stop hands over to the next kproxy process.
type StopOptions struct {
	// KeepRules leaves the kernel portal rules in place, as kube-proxy
	// does: the next process (started before this one stops, or after)
	// takes them over with the same proxy ports, so service traffic is
	// never sent nowhere; `kproxy cleanup` removes them.
	KeepRules bool
	// Grace is how long established connections and flows may go on after
	// the listeners closed, before they are closed too.
	Grace time.Duration
}

// dialWait bounds a stop's wait for accepted connections still dialing
// (every dial timeout of one connection together is under 4 s).
const dialWait = 5 * time.Second

// Stop stops the tree, removing its kernel rules, and ends established
// connections and flows at once (tests, embedding).
func (p *Proxy) Stop(ctx context.Context) error { return p.StopWith(ctx, StopOptions{}) }

// StopWith stops the tree (closing every listener: with a successor's
// sockets in the same SO_REUSEPORT group, new connections go there), then
// lets established connections drain for o.Grace and closes what is left.
// ActorSystem.Shutdown stops no actors, so the Proxier is poisoned and
// awaited.
func (p *Proxy) StopWith(ctx context.Context, o StopOptions) error {
	// Stop accepting first, and let the connections already accepted get
	// their endpoint from the Balancers before the actors stop.
	p.Listeners.StopAccepting()
	if o.Grace > 0 {
		// Datagrams are the next process's to read (it shares the
		// sockets, or takes them from the keeper); the flows here get
		// their replies through them during the drain.
		p.Listeners.StopReading()
	}
	dctx, cancel := context.WithTimeout(ctx, dialWait)
	p.Conns.WaitDialed(dctx)
	cancel()
	type stopped struct {
		err error
		udp []*datapath.Listener // closed after the drain
	}
	done := make(chan stopped, 1)
	go func() {
		var udp []*datapath.Listener
		p.System.Root.StopFuture(p.Watcher).Wait()
		err := p.System.Root.StopFuture(p.Proxier).Wait()
		// The records outlive the actors: their sockets close here (UDP
		// ones after their flows' drain); their proxy ports and rules stay
		// for the next process.
		for _, rec := range p.desired.records {
			if o.Grace > 0 {
				udp = append(udp, rec.sockets.CloseAfterFlows()...)
			} else {
				rec.sockets.Close()
			}
		}
		if p.RulesPID != nil {
			p.System.Root.StopFuture(p.RulesPID).Wait()
			switch {
			case o.KeepRules:
				p.cfg.Log.Info().Msg("kernel portal rules left in place for the next kproxy (kproxy cleanup removes them)")
			default:
				if cerr := p.cfg.Rules.Cleanup(ctx); cerr != nil {
					err = errors.Join(err, fmt.Errorf("clean up portal rules: %w", cerr))
				} else {
					p.cfg.Log.Info().Msg("kernel portal rules removed")
				}
			}
		}
		done <- stopped{err, udp}
	}()
	var err error
	var udp []*datapath.Listener
	select {
	case st := <-done:
		err, udp = st.err, st.udp
	case <-ctx.Done():
		err = fmt.Errorf("stop actors: %w", ctx.Err())
	}
	// A UDP socket no longer read closes as soon as its flows have their
	// answers, not at the end of the TCP drain: it is in its address's
	// SO_REUSEPORT group, and a socket the next process opens there later
	// (a service created meanwhile that gets the same proxy port) would
	// share its datagrams with this unread one.
	var udpClosed sync.WaitGroup
	gctx, gcancel := context.WithTimeout(ctx, o.Grace)
	defer gcancel()
	for _, l := range udp {
		udpClosed.Add(1)
		go func() {
			defer udpClosed.Done()
			l.CloseWhenDrained(gctx)
		}()
	}
	if o.Grace > 0 {
		if n := p.Conns.Len(); n > 0 {
			p.cfg.Log.Info().Int("open", n).Dur("grace", o.Grace).Msg("listeners closed; draining established connections and flows")
		}
		dctx, cancel := context.WithTimeout(ctx, o.Grace)
		left := p.Conns.Drain(dctx)
		cancel()
		if left > 0 {
			p.cfg.Log.Warn().Int("closed", left).Msg("grace period over: closing the connections and flows left")
		}
	}
	gcancel()
	udpClosed.Wait()
	p.System.Root.StopFuture(p.supervisor).Wait()
	p.cfg.Reaper.Stop()
	p.Conns.CloseAll()
	p.System.EventStream.Unsubscribe(p.sub)
	p.System.Shutdown()
	return err
}
