package remote

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/messages"
)

// Replicas makes a core one of several on protoactor's cluster: the
// cluster's provider finds the others, and its identity lookup (disthash)
// places each node on one replica. Every replica watches the source itself;
// a backend may subscribe to any of them and is redirected to its node's.
type Replicas struct {
	// Name is the cluster's: replicas of one name form one cluster.
	Name string
	// Provider finds the replicas: kubernetes (pods by label) in a
	// cluster, automanaged (HTTP health checks of a fixed list) elsewhere.
	Provider cluster.ClusterProvider
}

// NodeKind is the grain kind whose identities are node names: where the
// identity lookup activates a node's grain is the replica that serves it.
const NodeKind = "kproxy-node"

// startMember starts remoting as a member of rep's cluster; onTopology
// gets each membership the cluster agrees on, from the first.
func startMember(rc Config, rep *Replicas, onTopology func(topology)) (*remoteSystem, error) {
	rs, cfg, err := prepareRemote(rc, "core")
	if err != nil {
		return nil, err
	}
	kind := cluster.NewKind(NodeKind, actor.PropsFromProducer(func() actor.Actor { return nodeGrain{} }))
	c := cluster.New(rs.system, cluster.Configure(rep.Name, rep.Provider, disthash.New(), cfg, cluster.WithKinds(kind)))
	rs.system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			onTopology(topologyOf(t))
		}
	})
	if err := startRemoteServer(c.StartMember); err != nil {
		return nil, fmt.Errorf("core replica: %w", err)
	}
	rs.remote, rs.cluster = c.Remote, c
	return rs, nil
}

// nodeGrain marks where a node is served. Placement stops it when the node
// moves to another replica (one joined); it tells this replica's core,
// which sends the node's backends to their new replica.
type nodeGrain struct{}

func (nodeGrain) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Stopping); ok {
		if id := cluster.GetClusterIdentity(ctx); id != nil {
			ctx.Send(actor.NewPID(ctx.Self().Address, CoreActorName), &nodeMoved{node: id.Identity})
		}
	}
}

// nodeMoved: this replica no longer serves node.
type nodeMoved struct{ node string }

// topology is the cluster's member addresses, as the core actor keeps them.
type topology struct{ members []string }

func topologyOf(t *cluster.ClusterTopology) topology {
	out := make([]string, 0, len(t.GetMembers()))
	for _, m := range t.GetMembers() {
		out = append(out, m.GetHost()+":"+strconv.Itoa(int(m.GetPort())))
	}
	slices.Sort(out)
	return topology{members: out}
}

// heldSubscribe is a Subscribe that names a lost replica still counted as
// a member: placement could name it again, so it waits for the cluster to
// drop it (or for releaseHeld, if the replica was not lost after all).
type heldSubscribe struct {
	m    *messages.Subscribe
	from *actor.PID
}

// releaseHeld routes the Subscribes held for lost after a bound, should the
// cluster keep it as a member (it lost only the backend, not the cluster).
type releaseHeld struct{ lost string }

// routed is a copy of m for the replica that serves it.
func routed(m *messages.Subscribe) *messages.Subscribe {
	return &messages.Subscribe{NodeName: m.GetNodeName(), Client: m.GetClient(), Routed: true, EndpointUpdates: m.GetEndpointUpdates(),
		UpdateTriggers: m.GetUpdateTriggers()}
}

// route sends a backend to the replica that serves its node: the identity
// lookup places the node (activating its grain there), off the actor since
// it asks that replica. A Subscribe naming a lost replica that the cluster
// still counts waits until it is dropped, so placement cannot name it.
func (c *coreActor) route(ctx actor.Context, m *messages.Subscribe, from *actor.PID) {
	self := ctx.Self()
	if lost := m.GetLostReplica(); lost != "" && lost != self.Address && slices.Contains(c.members, lost) {
		if len(c.held[lost]) == 0 {
			scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(2*c.cfg.Heartbeat, self, releaseHeld{lost: lost})
		}
		c.held[lost] = append(c.held[lost], heldSubscribe{m: m, from: from})
		return
	}
	cl, root, log, node := c.cfg.cluster, ctx.ActorSystem().Root, c.cfg.Log, m.GetNodeName()
	go func() {
		switch pid := cl.Get(node, NodeKind); {
		case pid == nil:
			log.Warn().Str("node", node).Msg("no core replica could be placed for the node; it subscribes again")
		case pid.Address == self.Address:
			root.RequestWithCustomSender(self, routed(m), from)
		default:
			root.Send(from, &messages.SubscribeRedirect{Replica: pid.Address})
		}
	}()
}

// topology takes the cluster's membership and routes the Subscribes that
// waited for a lost replica to leave it.
func (c *coreActor) topology(ctx actor.Context, t topology) {
	c.members = t.members
	c.cfg.Log.Info().Strs("replicas", t.members).Msg("core replicas")
	for lost := range c.held {
		if !slices.Contains(c.members, lost) {
			c.release(ctx, lost)
		}
	}
}

// release routes what was held for lost, as though no replica were lost.
func (c *coreActor) release(ctx actor.Context, lost string) {
	held := c.held[lost]
	delete(c.held, lost)
	for _, h := range held {
		c.route(ctx, &messages.Subscribe{NodeName: h.m.GetNodeName(), Client: h.m.GetClient(), EndpointUpdates: h.m.GetEndpointUpdates(),
			UpdateTriggers: h.m.GetUpdateTriggers()}, h.from)
	}
}

// moved sends a node's backends elsewhere: placement moved it to another
// replica (one joined).
func (c *coreActor) moved(ctx actor.Context, node string) {
	for key, s := range c.subs {
		if s.node != node {
			continue
		}
		c.forget(key)
		ctx.Request(s.pid, &messages.SubscribeRedirect{}) // from this core: the backend checks who says so
		c.cfg.Log.Info().Str("node", node).Str("subscriber", key).Msg("node moved to another core replica; its backend subscribes there")
	}
	for key, h := range c.queue.byKey {
		if h.m.GetNodeName() == node {
			c.queue.remove(key)
			ctx.Request(h.from, &messages.SubscribeRedirect{})
		}
	}
	c.admit(ctx)
}

// leaving: this replica is stopping (Core.Stop).
type leaving struct{}

// leave sends every backend to the other replicas, naming this one lost so
// that they wait for the cluster to drop it rather than be placed here
// again, and answers once they are told.
func (c *coreActor) leave(ctx actor.Context) {
	for key, s := range c.subs {
		ctx.Request(s.pid, &messages.SubscribeRedirect{Leaving: true})
		c.forget(key)
	}
	for key, h := range c.queue.byKey {
		ctx.Request(h.from, &messages.SubscribeRedirect{Leaving: true})
		c.queue.remove(key)
	}
	for key, w := range c.waiting {
		ctx.Request(w.from, &messages.SubscribeRedirect{Leaving: true})
		delete(c.waiting, key)
	}
	c.cfg.counters.Queued.Store(0)
	c.cfg.Log.Info().Msg("core replica leaving: its backends subscribe through the others")
	ctx.Respond(true)
}

// replicas is every replica's address, this one first (no cluster: none).
func (c *coreActor) replicas(ctx actor.Context) []string {
	if len(c.members) == 0 {
		return nil
	}
	self := ctx.Self().Address
	out := []string{self}
	for _, a := range c.members {
		if a != self {
			out = append(out, a)
		}
	}
	return out
}
