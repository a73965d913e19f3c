package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/flushing"
	"github.com/kproxy/kproxy/actors/supervision"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// CoreActorName is the core's actor on its remoting address: a backend
// subscribes to actor.NewPID(coreAddress, CoreActorName).
const CoreActorName = "kproxy-core"

// leaseHeartbeats is the core's default lease in heartbeats, and how many
// heartbeats a backend waits for a core that is silent but answers, and
// at most between two Subscribes the core has not answered.
const leaseHeartbeats = 10

// Defaults of the core protocol.
const (
	// DefaultCoreMinSyncPeriod spaces the core's flushes under sustained
	// changes as the node proxy's Watcher does by default
	// (actors.DefaultMinSyncPeriod).
	DefaultCoreMinSyncPeriod = 100 * time.Millisecond
	DefaultCoreHeartbeat     = time.Second
	DefaultCoreMaxInFlight   = 32
	// DefaultCoreMaxSnapshotsInFlight bounds the snapshots sent and not
	// yet acknowledged, so that thousands of nodes subscribing at once
	// are served in turn, each within its lease.
	DefaultCoreMaxSnapshotsInFlight = 16
)

// CoreConfig configures a core: one source watched once, served to many
// backends, each its node's view.
type CoreConfig struct {
	Views watcher.NodeViews
	// MinSyncPeriod is the minimum interval between flushes once a burst
	// is spent, as the Watcher's: a change after a quiet period is sent
	// at once, and none waits longer than this.
	MinSyncPeriod time.Duration
	// Heartbeat is how often an idle subscription hears from the core;
	// backends, told it in their snapshot, treat 3 missed heartbeats as
	// the core lost. Each idle node costs the core a heartbeat and its
	// acknowledgement per interval.
	Heartbeat time.Duration
	// Lease drops a subscription whose backend has acknowledged nothing
	// for this long (it re-subscribes when it notices); leaseHeartbeats
	// heartbeats unless set.
	Lease time.Duration
	// MaxInFlight is how many Deltas a backend may leave unacknowledged;
	// beyond, the core stops sending it changes and sends one Delta of
	// what it missed once it has caught up (a bounded queue per backend).
	MaxInFlight int
	// MaxSnapshotsInFlight is how many snapshots may wait for their
	// acknowledgement; further Subscribes queue in the order they came.
	MaxSnapshotsInFlight int
	Remote               Config
	Log                  zerolog.Logger
	// Replicas, when set, makes this core one replica of several on
	// protoactor's cluster (replicas.go); nil serves alone.
	Replicas *Replicas

	// identities, with client certificates required, names the node each
	// backend's certificate is for: it may subscribe to that node only.
	identities *identities
	counters   *CoreCounters
	cluster    *cluster.Cluster
}

func (c *CoreConfig) defaults() {
	if c.MinSyncPeriod <= 0 {
		c.MinSyncPeriod = DefaultCoreMinSyncPeriod
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultCoreHeartbeat
	}
	if c.Lease <= 0 {
		// In heartbeats: a longer heartbeat (thousands of nodes) must not
		// drop backends between two of them.
		c.Lease = leaseHeartbeats * c.Heartbeat
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultCoreMaxInFlight
	}
	if c.MaxSnapshotsInFlight <= 0 {
		c.MaxSnapshotsInFlight = DefaultCoreMaxSnapshotsInFlight
	}
	if c.counters == nil {
		c.counters = &CoreCounters{}
	}
}

// Core is a running core: its source, actor system and remoting.
type Core struct {
	rs  *remoteSystem
	pid atomic.Pointer[actor.PID]
	cfg CoreConfig
	// members is the cluster's latest membership (replicas only), kept
	// until the core actor is there to take it.
	members atomic.Pointer[topology]
	// changed is closed, and replaced, each time members changes.
	changedMu sync.Mutex
	changed   chan struct{}
	stop      sync.Once
}

// CoreCounters are a core's running totals, for its metrics.
type CoreCounters struct {
	Subscriptions atomic.Int64
	// Queued is how many Subscribes wait for a snapshot slot.
	Queued                              atomic.Int64
	Snapshots, Deltas, Resyncs, Dropped atomic.Int64
	Refused                             atomic.Int64
}

// Counters are the core's running totals.
func (c *Core) Counters() *CoreCounters { return c.cfg.counters }

// StartCore starts cfg.Views (returning once it is complete, as a node
// proxy's source), then serves subscriptions over remoting on
// cfg.Remote.Listen until ctx ends or Stop.
func StartCore(ctx context.Context, cfg CoreConfig) (*Core, error) {
	cfg.defaults()
	c := &Core{cfg: cfg, changed: make(chan struct{})}
	var err error
	if cfg.Replicas != nil {
		c.rs, err = startMember(cfg.Remote, cfg.Replicas, c.topologyChanged)
	} else {
		c.rs, err = startRemote(cfg.Remote, "core")
	}
	if err != nil {
		return nil, err
	}
	rs := c.rs
	c.cfg.identities, c.cfg.cluster = rs.identities, rs.cluster
	pid, err := rs.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newCoreActor(&c.cfg) },
		actor.WithGuardian(supervision.Default)), CoreActorName)
	if err != nil {
		rs.stop()
		return nil, err
	}
	c.pid.Store(pid)
	root := rs.system.Root
	if t := c.members.Load(); t != nil {
		root.Send(pid, *t) // what the cluster agreed on before the actor was there
	}
	if err := cfg.Views.Start(ctx, func(e watcher.Event) {
		root.Send(pid, &e)
	}); err != nil {
		c.Stop()
		return nil, err
	}
	root.Send(pid, &messages.SourceSynced{})
	cfg.Log.Info().Str("address", rs.address()).Bool("token", cfg.Remote.Token != "").Bool("tls", cfg.Remote.ServerTLS != nil).
		Msg("core serving node-local views over protoactor remoting")
	return c, nil
}

// Address is the core's remoting address (what backends dial).
func (c *Core) Address() string { return c.rs.address() }

// Members is how many replicas this one counts in its cluster (1 serving
// alone).
func (c *Core) Members() int {
	if t := c.members.Load(); t != nil {
		return len(t.members)
	}
	return 1
}

// WaitMembers returns once this replica counts n replicas in its
// cluster, or with ctx's error.
func (c *Core) WaitMembers(ctx context.Context, n int) error {
	for {
		c.changedMu.Lock()
		changed := c.changed
		c.changedMu.Unlock()
		if c.Members() == n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// topologyChanged hands the cluster's membership to the core actor.
func (c *Core) topologyChanged(t topology) {
	c.members.Store(&t)
	c.changedMu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.changedMu.Unlock()
	if pid := c.pid.Load(); pid != nil {
		c.rs.system.Root.Send(pid, t)
	}
}

// Stats asks the core for its subscriptions.
func (c *Core) Stats(timeout time.Duration) (*messages.CoreStats, error) {
	r, err := c.rs.system.Root.RequestFuture(c.pid.Load(), &messages.GetCoreStats{}, timeout).Result()
	if err != nil {
		return nil, err
	}
	st, ok := r.(*messages.CoreStats)
	if !ok {
		return nil, errors.New("unexpected answer to GetCoreStats")
	}
	return st, nil
}

// Stop stops the core's actors, remoting and source. A replica first
// sends its backends to the others.
func (c *Core) Stop() { c.stop.Do(c.stopOnce) }

func (c *Core) stopOnce() {
	if c.cfg.cluster != nil {
		_, _ = c.rs.system.Root.RequestFuture(c.pid.Load(), leaving{}, 5*time.Second).Result()
	}
	_ = c.rs.system.Root.StopFuture(c.pid.Load()).Wait()
	c.cfg.Views.Stop()
	c.rs.stop()
}

// subscription is one backend's protocol state; what its node's view
// holds is the core's NodesTracker's, under the subscription's key.
type subscription struct {
	key     string // the subscriber's PID
	pid     *actor.PID
	node    string
	client  string
	session string
	// compact: the backend takes endpoint updates with their trigger times
	// (Subscribe's endpoint_updates and update_triggers).
	compact bool
	// seq is the last message sent, acked the last the backend applied.
	seq, acked uint64
	lastAck    time.Time
	// behind: the backend had MaxInFlight unacknowledged; it gets what
	// it missed in one Delta once it acknowledges everything sent.
	behind  bool
	resyncs int64
	// For the core's page: what was sent, since when it is subscribed, and
	// since when a message waits for its acknowledgement (zero: none).
	deltas, snapshots int64
	subscribed        time.Time
	unackedSince      time.Time
	// lastSent is when it was last sent a Snapshot or Delta (an idle
	// subscription is sent a heartbeat instead).
	lastSent time.Time
	// snapshotSeq is the seq of its snapshot until acknowledged (0 after).
	snapshotSeq uint64
}

// sent notes a message sent to s: the first one unacknowledged starts its lag.
func (s *subscription) sent(now time.Time) {
	s.seq++
	s.lastSent = now
	if s.unackedSince.IsZero() {
		s.unackedSince = now
	}
}

// inFlight is how many messages s has not acknowledged.
func (s *subscription) inFlight() uint64 { return s.seq - s.acked }

func (s *subscription) stats(ports int) *messages.SubscriptionStats {
	return &messages.SubscriptionStats{NodeName: s.node, Subscriber: s.key, Session: s.session, Client: s.client,
		Seq: s.seq, Acked: s.acked, ServicePorts: int32(ports), Resyncs: s.resyncs,
		Deltas: s.deltas, Snapshots: s.snapshots, Behind: s.behind,
		SubscribedUnixNano: s.subscribed.UnixNano(), LastAckUnixNano: s.lastAck.UnixNano(), UnackedSinceUnixNano: unixNano(s.unackedSince)}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

type coreActor struct {
	cfg *CoreConfig
	// nodes holds every subscription's view, each change built once per
	// class of nodes that see it alike.
	nodes    *watcher.NodesTracker
	id       string
	synced   bool
	pacing   *watcher.Flushes
	sessions int64
	subs     map[string]*subscription // by the subscriber's PID
	flushes  int64
	resyncs  int64
	stopTick scheduler.CancelFunc
	// Replicas only: the cluster's members (remoting addresses, sorted),
	// and Subscribes held until a lost replica leaves them.
	members []string
	held    map[string][]heldSubscribe
	// waiting: Subscribes that came before the source was complete.
	waiting map[string]heldSubscribe // by subscriber
	// queue: Subscribes waiting for one of the snapshots in flight
	// (snapshotting of MaxSnapshotsInFlight) to be acknowledged.
	queue        *subscribeQueue
	snapshotting int
}

func newCoreActor(cfg *CoreConfig) *coreActor {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &coreActor{cfg: cfg, id: hex.EncodeToString(b), subs: map[string]*subscription{}, nodes: watcher.NewNodesTracker(cfg.Views), held: map[string][]heldSubscribe{}, waiting: map[string]heldSubscribe{}, queue: newSubscribeQueue(),
		pacing: watcher.NewFlushes(cfg.MinSyncPeriod, &watcher.CPUBudget{Share: coreFlushShare})}
}

func (c *coreActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.stopTick = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendRepeatedly(c.cfg.Heartbeat, c.cfg.Heartbeat, ctx.Self(), &messages.CoreTick{})
	case *actor.Stopping, *actor.Restarting:
		if c.stopTick != nil {
			c.stopTick()
		}
	case *messages.SourceSynced:
		c.synced = true
		waiting := c.waiting
		c.waiting = map[string]heldSubscribe{}
		for _, w := range waiting {
			c.subscribe(ctx, w.m, w.from)
		}
	case *messages.Subscribe:
		c.subscribe(ctx, m, ctx.Sender())
	case topology:
		c.topology(ctx, m)
	case releaseHeld:
		c.release(ctx, m.lost)
	case *nodeMoved:
		c.moved(ctx, m.node)
	case leaving:
		c.leave(ctx)
	case *watcher.Event:
		// Applied once to the source's objects, then marked once: a
		// Node's own change (its zone) concerns only that node's views.
		for _, svc := range watcher.Affected(c.cfg.Views, *m) {
			if svc == "" && m.Node != "" {
				c.nodes.MarkNode(m.Node)
			} else {
				c.nodes.Mark(svc)
			}
		}
		flushing.Request(ctx, c.pacing, watcher.Unpaced)
	case *messages.FlushChanges:
		c.flushDue(ctx, flushing.Lane(m))
	case *messages.SubscriptionAck:
		c.ack(ctx, m)
	case *messages.CoreTick:
		c.tick(ctx)
	case *messages.GetCoreStats:
		st := &messages.CoreStats{Flushes: c.flushes, Resyncs: c.resyncs}
		for _, s := range c.subs {
			st.Subscriptions = append(st.Subscriptions, s.stats(c.nodes.Ports(s.key)))
		}
		ctx.Respond(st)
	}
}

// pidKey names a subscriber by its PID (PID.String formats it as text
// protobuf, which showed in the core's profile on every acknowledgement).
func pidKey(p *actor.PID) string { return p.GetAddress() + "/" + p.GetId() }

// coreFlushShare is the share of one CPU a core's flushes may use under
// sustained churn (watcher.CPUBudget): building, encoding and sending
// them, and the acknowledgements coming back. Changes then coalesce the
// more nodes there are, so a change costs about the same whatever their
// number.
const coreFlushShare = 0.5

// flushDue runs lane's flush, as the Watcher's: the unpaced one sends
// endpoint-only changes and leaves the rest to the paced one.
func (c *coreActor) flushDue(ctx actor.Context, lane watcher.Lane) {
	c.pacing.Flushing(lane, time.Now())
	if lane == watcher.Paced {
		c.flushes++
	}
	sent, held := c.flush(ctx, lane == watcher.Unpaced)
	if !sent {
		c.pacing.Unused(lane)
	}
	if held && lane == watcher.Unpaced {
		flushing.Request(ctx, c.pacing, watcher.Paced)
	}
}

// flush sends every subscription what changed in its view, each change
// built once for the nodes that see it alike and encoded once for the
// subscriptions that get the same. It says whether anything was sent, and
// whether a change waits for the paced flush.
//
// The unpaced flush sends only endpoint-only changes, and not to a
// backend with half its MaxInFlight unacknowledged: its changes wait in
// the tracker, owed, and go with its next acknowledgement, so the Deltas
// on the wire grow with a backend's lag instead of their count and a
// backend that keeps up never falls behind (a full Snapshot) from changes
// that need no pacing. The paced flush sends everything; a backend with
// MaxInFlight unacknowledged falls behind instead.
func (c *coreActor) flush(ctx actor.Context, unpaced bool) (sent, held bool) {
	limit := uint64(c.cfg.MaxInFlight)
	if unpaced {
		limit = uint64(max(c.cfg.MaxInFlight/2, 1))
	}
	f := c.nodes.Flush(unpaced, func(key string) bool {
		s := c.subs[key]
		return s == nil || s.behind || s.inFlight() >= limit
	})
	c.logErrors(f.Errors)
	enc := newEncoder()
	for key, pieces := range f.Members {
		if s := c.subs[key]; s != nil {
			c.sendDelta(ctx, s, enc.delta(pieces, s.compact))
		}
	}
	if !unpaced {
		for _, s := range c.subs {
			if !s.behind && c.nodes.Owes(s.key) {
				s.behind = true
				c.cfg.Log.Warn().Str("node", s.node).Str("subscriber", s.key).Uint64("unacknowledged", s.inFlight()).
					Msg("backend is slow: holding its changes back; it gets what it missed in one delta once it catches up")
			}
		}
	}
	return len(f.Members) > 0, f.Held
}

func (c *coreActor) subscribe(ctx actor.Context, m *messages.Subscribe, from *actor.PID) {
	if from == nil {
		return
	}
	if m.GetNodeName() == "" {
		ctx.Send(from, &messages.SubscribeRefused{Reason: "Subscribe without a node name (--node-name)"})
		c.cfg.Log.Warn().Str("subscriber", pidKey(from)).Msg("subscription refused: no node name")
		return
	}
	if ids := c.cfg.identities; ids != nil {
		if id, _ := ids.get(from.GetAddress()); id != m.GetNodeName() {
			reason := fmt.Sprintf("node %q asked for by a client certificate for %q: a backend gets only the view of the node its certificate names", m.GetNodeName(), id)
			ctx.Send(from, &messages.SubscribeRefused{Reason: reason})
			c.cfg.counters.Refused.Add(1)
			c.cfg.Log.Warn().Str("subscriber", pidKey(from)).Str("node", m.GetNodeName()).Str("certificate", id).Msg("subscription refused: " + reason)
			return
		}
	}
	if c.cfg.cluster != nil && !m.GetRouted() {
		c.route(ctx, m, from)
		return
	}
	if !c.synced {
		// Nothing is served before the source is complete: served once
		// it is (a backend asking again meanwhile would double the work).
		c.waiting[pidKey(from)] = heldSubscribe{m: m, from: from}
		return
	}
	key := pidKey(from)
	_, again := c.subs[key]
	c.forget(key)
	if c.snapshotting >= c.cfg.MaxSnapshotsInFlight {
		c.queue.put(key, heldSubscribe{m: m, from: from}, time.Now())
		c.cfg.counters.Queued.Store(int64(c.queue.len()))
		c.cfg.Log.Debug().Str("node", m.GetNodeName()).Str("subscriber", key).Int("queued", c.queue.len()).
			Msg("subscription queued: as many snapshots as allowed wait for their acknowledgement")
		return
	}
	c.serve(ctx, m, from, again)
}

// serve subscribes from: a new session and its node's whole view.
func (c *coreActor) serve(ctx actor.Context, m *messages.Subscribe, from *actor.PID, again bool) {
	c.sessions++
	key := pidKey(from)
	s := &subscription{key: key, pid: from, node: m.GetNodeName(), client: m.GetClient(), session: fmt.Sprintf("%s-%d", c.id, c.sessions),
		compact: m.GetEndpointUpdates() && m.GetUpdateTriggers(), lastAck: time.Now(), subscribed: time.Now()}
	c.subs[key] = s
	c.cfg.counters.Subscriptions.Store(int64(len(c.subs)))
	c.sendSnapshot(ctx, s, c.nodes.Add(key, s.node))
	s.snapshotSeq = s.seq
	c.snapshotting++
	c.cfg.Log.Info().Str("node", s.node).Str("subscriber", key).Str("client", s.client).Str("session", s.session).
		Bool("resubscribed", again).Int("servicePorts", c.nodes.Ports(key)).Int("subscriptions", len(c.subs)).Msg("backend subscribed")
}

// forget ends key's subscription, if any (a queued Subscribe keeps its
// place: asking again refreshes it).
func (c *coreActor) forget(key string) {
	s := c.subs[key]
	if s == nil {
		return
	}
	delete(c.subs, key)
	c.nodes.Remove(key)
	c.cfg.counters.Subscriptions.Store(int64(len(c.subs)))
	if s.snapshotSeq != 0 {
		s.snapshotSeq = 0
		c.snapshotting--
	}
}

// admit serves queued Subscribes while snapshots may be sent.
func (c *coreActor) admit(ctx actor.Context) {
	for c.snapshotting < c.cfg.MaxSnapshotsInFlight {
		h, ok := c.queue.pop()
		if !ok {
			break
		}
		c.serve(ctx, h.m, h.from, false)
	}
	c.cfg.counters.Queued.Store(int64(c.queue.len()))
}

func (c *coreActor) logErrors(errs []error) {
	for _, err := range errs {
		c.cfg.Log.Warn().Err(err).Msg("service rejected; every node keeps its previous state of it")
	}
}

// sendSnapshot sends s its node's whole view.
func (c *coreActor) sendSnapshot(ctx actor.Context, s *subscription, views []*watcher.ClassView) {
	s.sent(time.Now())
	s.behind = false
	s.snapshots++
	c.cfg.counters.Snapshots.Add(1)
	m := &messages.Snapshot{Session: s.session, Seq: s.seq, NodeName: s.node, SentUnixNano: time.Now().UnixNano(), Replicas: c.replicas(ctx),
		HeartbeatMillis: c.cfg.Heartbeat.Milliseconds()}
	m.ProtoReflect().SetUnknown(snapshotBody(views))
	ctx.Request(s.pid, m) // from this core: a backend sent here by another replica learns who serves it
}

// sendDelta sends s one flush's changes, encoded.
func (c *coreActor) sendDelta(ctx actor.Context, s *subscription, body []byte) {
	s.sent(time.Now())
	s.deltas++
	c.cfg.counters.Deltas.Add(1)
	m := &messages.Delta{Session: s.session, Seq: s.seq, SentUnixNano: time.Now().UnixNano()}
	m.ProtoReflect().SetUnknown(body)
	ctx.Send(s.pid, m)
}

func (c *coreActor) ack(ctx actor.Context, m *messages.SubscriptionAck) {
	from := ctx.Sender()
	if from == nil {
		return
	}
	s := c.subs[pidKey(from)]
	if s == nil || s.session != m.GetSession() {
		return // an old session's
	}
	s.lastAck = time.Now()
	if m.GetSeq() > s.acked {
		s.acked = m.GetSeq()
	}
	if s.acked >= s.seq {
		s.unackedSince = time.Time{}
	}
	if s.snapshotSeq != 0 && s.acked >= s.snapshotSeq {
		s.snapshotSeq = 0
		c.snapshotting--
		c.admit(ctx)
	}
	if !s.behind && c.nodes.Owes(s.key) && s.inFlight() < uint64(max(c.cfg.MaxInFlight/2, 1)) {
		// Its changes go with the next flush, not one of their own: a
		// flush per acknowledgement sent every dirty service to every
		// node once per node.
		flushing.Request(ctx, c.pacing, watcher.Unpaced)
	}
	if s.behind && s.acked == s.seq {
		// What it missed, in one Delta: the views it holds to its
		// class's now, which costs what changed meanwhile, not a
		// Snapshot of every service (many slow backends catching up at
		// once would each be sent everything).
		s.behind = false
		s.resyncs++
		c.resyncs++
		c.cfg.counters.Resyncs.Add(1)
		pieces := c.nodes.FlushOwed(s.key)
		c.cfg.Log.Info().Str("node", s.node).Str("subscriber", s.key).Int("services", len(pieces)).
			Msg("slow backend caught up: what it missed in one delta")
		if len(pieces) > 0 {
			c.sendDelta(ctx, s, newEncoder().delta(pieces, s.compact))
		}
	}
}

// tick heartbeats idle subscriptions and drops those whose lease ran out.
func (c *coreActor) tick(ctx actor.Context) {
	now := time.Now()
	for key, s := range c.subs {
		if now.Sub(s.lastAck) > c.cfg.Lease {
			c.forget(key)
			c.cfg.counters.Dropped.Add(1)
			c.cfg.Log.Warn().Str("node", s.node).Str("subscriber", key).Dur("silent", now.Sub(s.lastAck).Round(time.Millisecond)).
				Msg("backend lost: no acknowledgement within the lease; subscription dropped (it re-subscribes when it returns)")
			continue
		}
		if now.Sub(s.lastSent) < c.cfg.Heartbeat {
			continue // it heard from this session within the interval
		}
		ctx.Send(s.pid, &messages.Heartbeat{Session: s.session, Seq: s.seq})
	}
	// A queued backend asks again at least every leaseHeartbeats of its
	// own heartbeat (its Subscribe unanswered); one silent for twice that
	// is gone.
	if n := c.queue.expire(now.Add(-2 * max(c.cfg.Lease, leaseHeartbeats*DefaultCoreHeartbeat))); n > 0 {
		c.cfg.Log.Info().Int("subscriptions", n).Msg("queued subscriptions dropped: their backends stopped asking")
	}
	c.admit(ctx)
}
