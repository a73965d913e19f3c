package remote

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	protoremote "github.com/asynkron/protoactor-go/remote"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/actors/supervision"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// SourceConfig configures a backend's source: a core's view of
// NodeName, over protoactor remoting.
type SourceConfig struct {
	// Core is the core's remoting address (host:port), or several core
	// replicas' separated by commas: the backend subscribes through any,
	// is sent to the one serving its node, learns the rest from it, and
	// moves to another when that one goes away.
	Core     string
	NodeName string
	// Client names the backend in the core's logs.
	Client string
	// Heartbeat is how often the backend checks on its core, and the
	// core's heartbeat interval until a snapshot gives the core's own:
	// the core counts as lost after 3 of those without a message.
	Heartbeat time.Duration
	Remote    Config
	Log       zerolog.Logger
	// Applied, when set, is called after each Snapshot or Delta is applied
	// with when the core sent it (delivery latency, tests and benchmarks).
	Applied func(sent time.Time, snapshot bool)
}

// Source is a source whose view comes from a core (kproxy watch
// --serve) instead of informers: a watcher.Store kept equal to the core's
// view of this node, notifying every service that changes, as the file
// source does. Everything downstream is unchanged. While the core is away
// the Store keeps the last state (the proxy keeps serving it); when the
// core returns the backend re-subscribes and gets a full Snapshot.
type Source struct {
	*watcher.Store
	cfg SourceConfig
	rs  *remoteSystem
	pid *actor.PID
	// gone tells the subscriber of lost remoting connections.
	gone *eventstream.Subscription

	stats remoteCounters
}

// remoteCounters are a backend's link statistics, for its metrics.
type remoteCounters struct {
	connected                       atomic.Bool
	snapshots, deltas, resubscribes atomic.Int64
	delivered                       atomic.Pointer[func(time.Time)]
}

// RemoteStats reports whether the core is heard from, and the snapshots,
// deltas and re-subscriptions so far (metrics.RemoteStats).
func (s *Source) RemoteStats() (connected bool, snapshots, deltas, resubscribes int64) {
	return s.stats.connected.Load(), s.stats.snapshots.Load(), s.stats.deltas.Load(), s.stats.resubscribes.Load()
}

// OnDelivered sets what observes each delivery's latency (from the core's
// send to its application here).
func (s *Source) OnDelivered(fn func(sent time.Time)) { s.stats.delivered.Store(&fn) }

// NewSource prepares a source; Start connects.
func NewSource(cfg SourceConfig) *Source {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultCoreHeartbeat
	}
	if cfg.Client == "" {
		cfg.Client = "kproxy"
	}
	return &Source{Store: watcher.NewStore(), cfg: cfg}
}

// Start checks that the core accepts this backend's credentials (an error
// wrapping ErrRefused if not; a core that cannot be reached yet is waited
// for), starts remoting and subscribes, and returns once the first
// Snapshot is applied (the source is complete) or ctx ends.
func (s *Source) Start(ctx context.Context, notify func(watcher.Event)) error {
	if s.cfg.NodeName == "" {
		return errors.New("remote source: a node name is required (--node-name)")
	}
	// Remoting first: protoactor's Start sets gRPC's global logger, which
	// must not race with a gRPC client already running (checkCore's).
	rs, err := startRemote(s.cfg.Remote, "remote-source")
	if err != nil {
		return err
	}
	s.rs = rs
	addrs := coreAddresses(s.cfg.Core)
	if len(addrs) == 0 {
		return errors.New("remote source: no core address")
	}
	if err := checkCore(ctx, addrs[0], s.cfg.Remote); errors.Is(err, ErrRefused) {
		s.cfg.Log.Error().Err(err).Msg("the core refused this backend's credentials")
		s.Stop()
		return err
	} else if err != nil {
		s.cfg.Log.Warn().Err(err).Msg("core not reachable yet; subscribing until it is")
	}
	ready := make(chan error, 1)
	sub := &subscriber{cfg: &s.cfg, store: s.Store, notify: notify, addrs: addrs, target: addrs[0], core: actor.NewPID(addrs[0], CoreActorName),
		ready: ready, stats: &s.stats, heartbeat: s.cfg.Heartbeat}
	s.pid = rs.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return sub }, actor.WithGuardian(supervision.Default)))
	// A core killed closes its connections: act on that at once rather
	// than after three silent heartbeats.
	root, pid := rs.system.Root, s.pid
	s.gone = rs.system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*protoremote.EndpointTerminatedEvent); ok {
			root.Send(pid, coreGone{address: t.Address})
		}
	})
	s.cfg.Log.Info().Str("core", s.cfg.Core).Str("node", s.cfg.NodeName).Str("address", rs.address()).Msg("subscribing to the core")
	select {
	case err := <-ready:
		if err != nil {
			s.Stop()
		}
		return err
	case <-ctx.Done():
		s.Stop()
		return ctx.Err()
	}
}

// Address is this backend's own remoting address (the core dials it).
func (s *Source) Address() string {
	if s.rs == nil {
		return ""
	}
	return s.rs.address()
}

// Stop stops subscribing and remoting; the Store keeps the last state.
func (s *Source) Stop() {
	if s.rs == nil {
		return
	}
	if s.gone != nil {
		s.rs.system.EventStream.Unsubscribe(s.gone)
	}
	if s.pid != nil {
		_ = s.rs.system.Root.StopFuture(s.pid).Wait()
	}
	s.rs.stop()
	s.rs = nil
}

// subscriber is the backend's actor: it subscribes, applies Snapshots and
// Deltas to the Store in order, acknowledges them, and re-subscribes when
// the core goes silent, a message is missing, or the core restarted.
type subscriber struct {
	cfg    *SourceConfig
	store  *watcher.Store
	notify func(watcher.Event)
	// core is the replica serving this backend (the last Snapshot's
	// sender); addrs every core address known, entry the one subscribed
	// through next, target where the next Subscribe goes, routed whether a
	// replica sent it there, and lost the replica that went away.
	core   *actor.PID
	addrs  []string
	entry  int
	target string
	routed bool
	lost   string
	ready  chan error
	once   sync.Once
	stats  *remoteCounters

	session    string
	seq        uint64
	subscribed bool
	lastHeard  time.Time
	lostSince  time.Time
	lastAsked  time.Time
	// askAgain is how long an unanswered Subscribe is given before the
	// next: 2 heartbeats, doubling up to leaseHeartbeats while a core
	// that answers checks has not sent the snapshot (each Subscribe it
	// serves is one more snapshot to send).
	askAgain time.Duration
	// heartbeat is the core's interval, as its last snapshot said
	// (SourceConfig.Heartbeat until one does).
	heartbeat time.Duration
	checking  bool
	probing   bool // a coreProbed is on its way
	refused   string
	stopTick  scheduler.CancelFunc
}

// authChecked is the result of a credentials check run off the actor.
type authChecked struct {
	address string
	err     error
}

func (s *subscriber) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.stopTick = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendRepeatedly(s.cfg.Heartbeat, s.cfg.Heartbeat, ctx.Self(), &messages.SubscriberTick{})
		s.subscribe(ctx)
	case *actor.Stopping, *actor.Restarting:
		if s.stopTick != nil {
			s.stopTick()
		}
	case *messages.SubscriberTick:
		s.tick(ctx)
	case *messages.Snapshot:
		s.applySnapshot(ctx, m)
	case *messages.Delta:
		s.applyDelta(ctx, m)
	case *messages.Heartbeat:
		if m.GetSession() != s.session || !s.subscribed {
			return // an old session's, or one the core dropped: the tick re-subscribes
		}
		if m.GetSeq() != s.seq {
			s.resync(ctx, fmt.Sprintf("heartbeat at seq %d, applied %d", m.GetSeq(), s.seq))
			return
		}
		s.lastHeard = time.Now()
		ctx.Request(s.core, &messages.SubscriptionAck{Session: s.session, Seq: s.seq})
	case *messages.SubscribeRedirect:
		s.redirected(ctx, m)
	case coreGone:
		// protoactor reports any error on the connection, a transient one
		// too (its writer dials again): the core counts as gone only if
		// it does not answer now.
		if s.subscribed && m.address == s.core.Address {
			s.probe(ctx, m.address)
		}
	case coreProbed:
		s.probing = false
		if m.err != nil && s.subscribed && m.address == s.core.Address {
			s.lose(time.Now(), "it does not answer: "+m.err.Error())
			s.check(ctx)
		}
	case *messages.SubscribeRefused:
		s.cfg.Log.Error().Str("core", s.target).Str("reason", m.GetReason()).Msg("the core refused the subscription")
		s.once.Do(func() { s.ready <- fmt.Errorf("%w: %s", ErrRefused, m.GetReason()) })
	case *authChecked:
		s.checked(ctx, m)
	}
}

func (s *subscriber) subscribe(ctx actor.Context) {
	s.lastAsked = time.Now()
	ctx.Request(actor.NewPID(s.target, CoreActorName),
		&messages.Subscribe{NodeName: s.cfg.NodeName, Client: s.cfg.Client, Routed: s.routed, LostReplica: s.lost, EndpointUpdates: true,
			UpdateTriggers: true})
}

// coreGone: remoting lost its connection to address.
type coreGone struct{ address string }

// coreProbed: whether the core at address answered after its connection
// was lost (nil: it did).
type coreProbed struct {
	address string
	err     error
}

// coreAddresses splits a comma-separated list of core addresses.
func coreAddresses(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// lose notes that the serving replica is gone (silent, or its connection
// closed): the next Subscribe goes through another replica, naming it.
func (s *subscriber) lose(now time.Time, why string) {
	s.subscribed = false
	s.stats.connected.Store(false)
	s.stats.resubscribes.Add(1)
	s.lostSince = now
	s.lost, s.routed = s.core.Address, false
	s.lastAsked = time.Time{} // a lost core answers no Subscribe
	s.next(s.lost)
	s.cfg.Log.Warn().Str("core", s.lost).Str("why", why).Str("next", s.target).
		Msg("lost the core; serving the last known state and re-subscribing")
}

// next moves the entry to the next known address that is not avoid.
func (s *subscriber) next(avoid string) {
	for range s.addrs {
		s.entry = (s.entry + 1) % len(s.addrs)
		if s.addrs[s.entry] != avoid {
			break
		}
	}
	s.target = s.addrs[s.entry]
}

// redirected follows a replica to the one serving this node; without one,
// the node moved: subscribe again through the replica that said so.
func (s *subscriber) redirected(ctx actor.Context, m *messages.SubscribeRedirect) {
	if s.subscribed && (ctx.Sender() == nil || ctx.Sender().Address != s.core.Address) {
		return // an answer to an earlier Subscribe
	}
	if m.GetLeaving() {
		switch from := ctx.Sender(); {
		case s.subscribed:
			s.lose(time.Now(), "the replica is leaving the cluster")
			s.check(ctx)
		case from != nil && from.Address == s.target:
			// Queued there, or waiting for its source: not served yet,
			// and never will be. On through another replica, naming it.
			s.lost, s.routed = s.target, false
			s.lastAsked = time.Time{}
			s.next(s.lost)
			s.cfg.Log.Info().Str("core", s.lost).Str("next", s.target).
				Msg("the replica this node waited for is leaving; subscribing through the next")
			s.check(ctx)
		}
		return
	}
	if m.GetReplica() != "" {
		s.target, s.routed = m.GetReplica(), true
	} else {
		s.target, s.routed = s.core.Address, false
		s.subscribed = false
		s.stats.connected.Store(false)
		s.stats.resubscribes.Add(1)
	}
	s.cfg.Log.Info().Str("replica", s.target).Bool("moved", m.GetReplica() == "").Msg("core replica serving this node")
	s.subscribe(ctx)
}

// tick notices a silent core and, until one answers again, checks every
// tick whether it is reachable and accepts this backend's credentials (a
// gRPC call off the actor), subscribing as soon as it does: protoactor's
// connection to an address that refuses waits 2 s before it gives up, so
// subscribing only to a core that answers brings a returning core's
// snapshot within about a tick, and a core that now refuses the
// credentials (a rotated token) is reported rather than silently retried.
func (s *subscriber) tick(ctx actor.Context) {
	now := time.Now()
	switch silent := now.Sub(s.lastHeard); {
	case s.subscribed && silent > leaseHeartbeats*s.heartbeat:
		s.lose(now, "silent for "+silent.Round(time.Millisecond).String()+", though it answers")
	case s.subscribed && silent > 3*s.heartbeat:
		// A core that answers is busy (thousands of nodes subscribing at
		// once), not gone: re-subscribing would add a snapshot to its
		// work. One that does not answer is lost.
		s.probe(ctx, s.core.Address)
	}
	s.check(ctx)
}

// probe checks, off the actor, whether the core at address answers.
func (s *subscriber) probe(ctx actor.Context, address string) {
	if s.probing {
		return
	}
	s.probing = true
	self, root, rc := ctx.Self(), ctx.ActorSystem().Root, s.cfg.Remote
	go func() {
		root.Send(self, coreProbed{address: address, err: checkCore(context.Background(), address, rc)})
	}()
}

// check runs the credentials check of the next Subscribe's address, unless
// subscribed or one runs.
func (s *subscriber) check(ctx actor.Context) {
	if s.subscribed || s.checking {
		return
	}
	s.checking = true
	self, root, core, rc := ctx.Self(), ctx.ActorSystem().Root, s.target, s.cfg.Remote
	go func() {
		defer func() {
			if p := recover(); p != nil {
				root.Send(self, &authChecked{err: fmt.Errorf("credentials check: %v", p)})
			}
		}()
		root.Send(self, &authChecked{address: core, err: checkCore(context.Background(), core, rc)})
	}()
}

// checked acts on a credentials check: subscribe to a core that answers,
// unless a Subscribe may still be answered (a core busy with a large
// snapshot would otherwise make a new one per tick).
func (s *subscriber) checked(ctx actor.Context, m *authChecked) {
	s.checking = false
	err := m.err
	switch {
	case errors.Is(err, ErrRefused):
		if msg := err.Error(); msg != s.refused {
			s.refused = msg
			s.cfg.Log.Error().Err(err).Msg("the core refused this backend's credentials; serving the last known state")
		}
		s.once.Do(func() { s.ready <- err })
	case err == nil && !s.subscribed && time.Since(s.lastAsked) >= max(s.askAgain, 2*s.heartbeat):
		if !s.lastAsked.IsZero() { // the last Subscribe went unanswered
			s.askAgain = min(2*max(s.askAgain, 2*s.heartbeat), leaseHeartbeats*s.heartbeat)
		}
		s.subscribe(ctx)
	case err != nil && !s.subscribed && m.address == s.target && len(s.addrs) > 1:
		s.routed = false // unreachable: through the next replica
		s.next(s.target)
	}
}

func (s *subscriber) resync(ctx actor.Context, why string) {
	s.cfg.Log.Warn().Str("core", s.core.Address).Str("why", why).Msg("out of step with the core; re-subscribing for a full snapshot")
	s.target, s.routed = s.core.Address, true // the replica serving it still does
	s.subscribed = false
	s.stats.connected.Store(false)
	s.stats.resubscribes.Add(1)
	s.lostSince = time.Now()
	s.subscribe(ctx)
}

func (s *subscriber) changed(services []string) {
	for _, svc := range services {
		s.notify(watcher.Event{Kind: watcher.KindRemote, Service: svc})
	}
}

func (s *subscriber) applySnapshot(ctx actor.Context, m *messages.Snapshot) {
	carried(m)
	if from := ctx.Sender(); from != nil {
		s.core = from
	}
	s.learn(m.GetReplicas())
	if hb := time.Duration(m.GetHeartbeatMillis()) * time.Millisecond; hb > 0 {
		s.heartbeat = hb
	}
	s.lost = ""
	wasLost := !s.lostSince.IsZero()
	changed := s.store.Replace(m.GetServicePorts(), nil, false)
	s.changed(changed)
	s.session, s.seq, s.subscribed, s.lastHeard, s.refused, s.askAgain = m.GetSession(), m.GetSeq(), true, time.Now(), "", 0
	ctx.Request(s.core, &messages.SubscriptionAck{Session: s.session, Seq: s.seq})
	ev := s.cfg.Log.Info().Str("core", s.core.Address).Str("session", s.session).Int("servicePorts", len(m.GetServicePorts())).Int("changedServices", len(changed))
	if wasLost {
		ev = ev.Dur("lostFor", time.Since(s.lostSince).Round(time.Millisecond))
		s.lostSince = time.Time{}
	}
	ev.Msg("snapshot from the core applied")
	s.stats.connected.Store(true)
	s.stats.snapshots.Add(1)
	s.observe(m.GetSentUnixNano(), true)
	s.once.Do(func() { s.ready <- nil })
}

// learn adds the replicas a core names to the addresses known.
func (s *subscriber) learn(replicas []string) {
	for _, a := range replicas {
		if !slices.Contains(s.addrs, a) {
			s.addrs = append(s.addrs, a)
		}
	}
}

func (s *subscriber) applyDelta(ctx actor.Context, m *messages.Delta) {
	if m.GetSession() != s.session || !s.subscribed {
		return
	}
	if m.GetSeq() != s.seq+1 {
		s.resync(ctx, fmt.Sprintf("delta %d after %d", m.GetSeq(), s.seq))
		return
	}
	carried(m)
	changed, err := s.store.Apply(m)
	if err != nil {
		s.resync(ctx, err.Error())
		return
	}
	s.changed(changed)
	s.seq, s.lastHeard = m.GetSeq(), time.Now()
	ctx.Request(s.core, &messages.SubscriptionAck{Session: s.session, Seq: s.seq})
	s.stats.deltas.Add(1)
	s.observe(m.GetSentUnixNano(), false)
}

func (s *subscriber) observe(sentUnixNano int64, snapshot bool) {
	sent := time.Unix(0, sentUnixNano)
	if fn := s.stats.delivered.Load(); fn != nil {
		(*fn)(sent)
	}
	if s.cfg.Applied != nil {
		s.cfg.Applied(sent, snapshot)
	}
}

// carried decodes the fields a core's message carries pre-encoded
// (encode.go) when it arrives without a trip through the wire (a core and
// a backend in one actor system); from the wire they are decoded already.
func carried(m proto.Message) {
	r := m.ProtoReflect()
	raw := r.GetUnknown()
	if len(raw) == 0 {
		return
	}
	r.SetUnknown(nil)
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(raw, m); err != nil {
		r.SetUnknown(raw) // not ours: left as it came
	}
}
