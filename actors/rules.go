package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/rules"
)

// rulesCheckInterval is how often the Rules actor verifies that its kernel
// rules still exist (someone may have flushed them).
const rulesCheckInterval = 10 * time.Second

// Rules owns the kernel portal rules. ServicePorts tell it what they need;
// it batches changes and programs them with one transaction per batch, so
// the cost follows the number of changes, not of services. Transactions
// run on a goroutine (they exec nft or iptables-restore), never inside
// Receive; changes arriving meanwhile form the next batch. It syncs fully on
// start (replacing stale rules of a crashed predecessor), after a failed
// transaction, and when its rules disappear.
type Rules struct {
	cfg   *Config
	rules rules.Interface
	*programmed

	needSync bool
	// checkLater is a check asked for while a transaction ran (an injected
	// fault asks for one at once): it runs when the transaction ends.
	checkLater bool
	inFlight   bool
	// The in-flight transaction: the service ports it programs (with their
	// desired rules, none for one deleted), and the change it makes to
	// kernel (a full sync's whole set, or del and add).
	pending  map[string][]rules.Rule
	want     rules.Set
	del, add []rules.Rule
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	timers   *scheduler.TimerScheduler
	stopTick scheduler.CancelFunc
}

// programmed is the Rules actor's state that outlives its incarnations:
// the desired rules, which no one else holds whole, and the one record of
// what the kernel holds (the kernel modes keep none, as knftables keeps
// none). A new incarnation starts with a full sync.
type programmed struct {
	desired map[string][]rules.Rule // by service port ID
	// kernel is what the last transactions programmed, by key (a rule's
	// ServicePort says whose): each transaction is planned against it
	// and committed to it when it succeeds.
	kernel *rules.Programmed
	dirty  map[string]bool
	// complete is set once the source's first state is all here
	// (DesiredStateComplete): no transaction runs before, so a restarted
	// kproxy never replaces the rules its predecessor left with a partial
	// table.
	complete bool
	// unavailable is the last report of rules an IP family lacks, logged once.
	unavailable string
	// batch numbers transactions across incarnations, so a transaction of
	// an earlier one that ends late is recognised.
	batch int64
	// traces are the trace contexts of the changes waiting for the next
	// transaction, by service port (tracing only).
	traces map[string]*messages.TraceContext
}

func newRules(cfg *Config) *actor.Props {
	st := &programmed{desired: map[string][]rules.Rule{}, kernel: rules.NewProgrammed(rules.Set{}), dirty: map[string]bool{}}
	return cfg.propsFor(func() actor.Actor { return &Rules{cfg: cfg, rules: cfg.Rules, programmed: st} })
}

// Receive implements actor.Actor.
func (r *Rules) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.started(ctx)
	case *actor.Stopping, *actor.Restarting:
		r.stopTick()
		r.wg.Wait() // let an in-flight transaction finish before anyone cleans up
		r.cancel()
	case *messages.InjectCrash:
		panic(fmt.Errorf("injected crash: %s", m.GetReason()))
	case *messages.SetPortalRules:
		r.set(ctx, m)
	case *messages.DeletePortalRules:
		r.traced(m.GetKey().ID(), m.GetTrace())
		r.changed(ctx, m.GetKey().ID(), nil)
	case *messages.RulesApplied:
		r.finished(ctx, m)
	case *messages.RetryRules:
		r.kick(ctx)
	case *messages.DesiredStateComplete:
		if !r.complete {
			r.complete = true
			r.kick(ctx)
		}
	case *messages.CheckRules:
		r.check(ctx)
	case *messages.RulesPresent:
		r.checked(ctx, m)
	}
}

// started (re)starts with a full sync: the kernel may hold a crashed
// predecessor's rules.
func (r *Rules) started(ctx actor.Context) {
	r.cfg.traceRestart(ctx)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.timers = scheduler.NewTimerScheduler(ctx.ActorSystem().Root)
	r.stopTick = r.timers.SendRepeatedly(rulesCheckInterval, rulesCheckInterval, ctx.Self(), &messages.CheckRules{})
	r.needSync = true
	if !r.complete {
		// Should the Proxier never say so (a bug), program what there is.
		r.timers.SendOnce(desiredStateWait, ctx.Self(), &messages.DesiredStateComplete{})
	}
	r.kick(ctx)
}

// desiredStateWait bounds the wait for DesiredStateComplete.
const desiredStateWait = 30 * time.Second

// set records what one service port needs now. Its ServicePort sends it
// when the definition, the proxy ports or the verdicts changed, and again
// when it restarts: a resend that leaves the rules as they are ends here.
func (r *Rules) set(ctx actor.Context, m *messages.SetPortalRules) {
	id := m.GetServicePort().GetKey().ID()
	rs, err := rules.ForServicePort(m.GetServicePort(), int(m.GetProxyPort()), int(m.GetExternalProxyPort()), m.GetInternal(), m.GetExternal())
	if err != nil {
		r.cfg.Log.Warn().Err(err).Str("servicePort", id).Msg("no portal rules")
	}
	if prev, ok := r.desired[id]; ok && slices.Equal(prev, rs) {
		return
	}
	r.traced(id, m.GetTrace())
	r.changed(ctx, id, rs)
}

// healthStageRules is the Rules actor's stage in Config.Health: changes
// are queued until a transaction programs them.
const healthStageRules = "rules"

// changed makes rs (none: delete) the desired rules of service port id.
func (r *Rules) changed(ctx actor.Context, id string, rs []rules.Rule) {
	if rs == nil {
		delete(r.desired, id)
	} else {
		r.desired[id] = rs
	}
	r.dirty[id] = true
	r.kick(ctx)
}

// check asks, off Receive, whether the rules are still in the kernel.
func (r *Rules) check(ctx actor.Context) {
	if r.needSync || !r.complete {
		return
	}
	if r.inFlight {
		r.checkLater = true
		return
	}
	r.checkLater = false
	self, root := ctx.Self(), ctx.ActorSystem().Root
	cur := r.kernel.Set // not changed until a transaction's end, after this check's
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ok, err := r.rules.Present(r.ctx, cur)
		root.Send(self, &messages.RulesPresent{Present: ok, Failure: failure(err, messages.FailureCode_KERNEL_RULES)})
	}()
}

// checked re-syncs when the rules are gone (someone flushed the table).
func (r *Rules) checked(ctx actor.Context, m *messages.RulesPresent) {
	if !m.GetPresent() && !r.needSync {
		r.cfg.Log.Warn().Str("error", m.GetFailure().GetMessage()).Msg("kernel portal rules are missing (table flushed?); re-syncing")
		r.needSync = true
		r.kick(ctx)
	}
}

// kick starts the next transaction if one is due and none is running.
func (r *Rules) kick(ctx actor.Context) {
	if r.needSync || len(r.dirty) > 0 {
		r.cfg.Health.QueuedUpdate(healthStageRules) // keeps the oldest queued time
	}
	if !r.complete || r.inFlight || (!r.needSync && len(r.dirty) == 0) {
		return
	}
	r.batch++
	full := r.needSync
	changing := make(map[string][]rules.Rule, len(r.dirty))
	for id := range r.dirty {
		changing[id] = r.desired[id] // none for a deleted one
	}
	// A full sync replaces everything: no rule of the kernel's holds a key
	// against it.
	against := r.kernel.Set
	if full {
		against = nil
		for id, rs := range r.desired {
			changing[id] = rs
		}
	}
	r.pending = changing
	upserts := r.flatten(changing, against)
	var removals []rules.Rule
	var err error
	if full {
		r.want, err = rules.Desired(upserts)
	} else {
		keep := make(map[rules.Key]bool, len(upserts))
		for _, u := range upserts {
			keep[u.Key()] = true
		}
		for id := range r.dirty {
			for _, old := range r.kernel.Owned(id) {
				if !keep[old.Key()] {
					removals = append(removals, old)
				}
			}
		}
		r.del, r.add, err = r.kernel.Plan(upserts, removals)
	}
	r.dirty = map[string]bool{}
	r.needSync = false
	r.inFlight = true
	self, root, batch := ctx.Self(), ctx.ActorSystem().Root, r.batch
	if err != nil {
		// Rules the kernel would refuse: a failed transaction.
		ctx.Send(self, &messages.RulesApplied{FullSync: full, Failure: failure(err, messages.FailureCode_KERNEL_RULES), Batch: batch})
		return
	}
	if !full && len(r.del)+len(r.add) == 0 {
		ctx.Send(self, &messages.RulesApplied{Batch: batch}) // nothing changes in the kernel
		return
	}
	stale := r.staleFlows(full, upserts, removals)
	cur, want, del, add := r.kernel, r.want, r.del, r.add
	span := r.transactionSpan(full, batch, len(upserts), len(removals))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var err error
		start := time.Now()
		if full {
			err = r.rules.Sync(r.ctx, want)
		} else {
			err = r.rules.Apply(r.ctx, cur, del, add)
		}
		endTransactionSpan(span, err)
		if err == nil || errors.Is(err, rules.ErrFamilyUnavailable) {
			r.cfg.Metrics.Synced(full, time.Since(start))
		}
		if err == nil || errors.Is(err, rules.ErrFamilyUnavailable) {
			r.clearStaleFlows(stale) // only once the rules that replace them are in
		}
		root.Send(self, &messages.RulesApplied{FullSync: full, Failure: failure(err, messages.FailureCode_KERNEL_RULES), Batch: batch})
	}()
}

// staleFlows lists the UDP rules of a batch whose frontends may have
// conntrack entries pointing elsewhere: on a full sync every one, else the
// new ones (a previous process had other proxy ports) and those whose
// proxy port or reject changed, and the removed ones (as rejects: nothing
// of theirs is kept). An endpoint change alone needs nothing: the kernel
// NATs to kproxy, which picks the endpoint.
func (r *Rules) staleFlows(full bool, upserts, removals []rules.Rule) []rules.Rule {
	if r.cfg.Conntrack == nil {
		return nil
	}
	var out []rules.Rule
	for _, u := range upserts {
		old, ok := r.kernel.Set[u.Key()]
		if u.Protocol == "udp" && (full || !ok || old.ProxyPort != u.ProxyPort || old.Reject != u.Reject || old.Drop != u.Drop || old.ShortCircuitPort != u.ShortCircuitPort) {
			out = append(out, u)
		}
	}
	for _, rm := range removals {
		if rm.Protocol == "udp" {
			rm.Reject = true
			out = append(out, rm)
		}
	}
	return out
}

// clearStaleFlows runs on the transaction's goroutine.
func (r *Rules) clearStaleFlows(stale []rules.Rule) {
	if len(stale) == 0 {
		return
	}
	n, err := r.cfg.Conntrack.ClearStale(stale)
	if err != nil {
		r.cfg.Log.Warn().Err(err).Msg("cannot clear stale UDP conntrack entries; clients keeping their source port may wait for them to expire")
	} else if n > 0 {
		r.cfg.Log.Info().Int("entries", n).Int("rules", len(stale)).Msg("cleared stale UDP conntrack entries")
	}
}

// flatten lists the rules of the service ports in set, leaving out (and
// logging) rules whose key another service port holds in programmed.
func (r *Rules) flatten(set map[string][]rules.Rule, programmed rules.Set) []rules.Rule {
	out, clashes := rules.Flatten(set, programmed)
	for _, c := range clashes {
		r.cfg.Log.Error().Str("servicePort", c.ServicePort).Str("rule", c.Key.String()).Str("owner", c.Owner).
			Msg("portal rule clashes with another service port's; not programmed")
	}
	return out
}

// finished records a transaction's outcome and starts the next one.
func (r *Rules) finished(ctx actor.Context, m *messages.RulesApplied) {
	if !r.inFlight || m.GetBatch() != r.batch {
		return // a transaction of an earlier incarnation: this one syncs fully
	}
	r.inFlight = false
	if f := m.GetFailure(); f.GetCode() == messages.FailureCode_FAMILY_UNAVAILABLE {
		// The rest is programmed. Warn once that a family is missing;
		// which rules it lacks changes with every service (debug).
		switch {
		case r.unavailable == "":
			r.cfg.Log.Warn().Str("error", f.GetMessage()).Msg("portal rules of an IP family this node cannot program are left out")
		case f.GetMessage() != r.unavailable:
			r.cfg.Log.Debug().Str("error", f.GetMessage()).Msg("portal rules left out (IP family unavailable)")
		}
		r.unavailable = f.GetMessage()
	} else if f != nil {
		r.cfg.Log.Error().Str("error", f.GetMessage()).Stringer("code", f.GetCode()).Bool("fullSync", m.GetFullSync()).Msg("programming kernel portal rules failed; re-syncing")
		// A failed transaction left the kernel in an unknown state: the
		// next one is a full sync, after a pause so a persistent error
		// does not spin.
		r.needSync = true
		for id := range r.pending {
			r.dirty[id] = true
		}
		r.timers.SendOnce(time.Second, ctx.Self(), &messages.RetryRules{})
		return
	}
	if m.GetFullSync() {
		r.kernel = rules.NewProgrammed(r.want)
		// Only once the source's first state is complete (a transaction
		// runs no earlier): the rules point at this process's sockets.
		r.cfg.Ready.Done(healthcheck.StageRules)
	} else {
		r.kernel.Commit(r.del, r.add)
	}
	r.want, r.del, r.add = nil, nil, nil
	ev := r.cfg.Log.Debug()
	if m.GetFullSync() {
		ev = r.cfg.Log.Info() // start, recovery: worth seeing; batches are not
	}
	ev.Int64("batch", m.GetBatch()).Bool("fullSync", m.GetFullSync()).Int("servicePorts", len(r.pending)).Msg("kernel portal rules programmed")
	if !r.needSync && len(r.dirty) == 0 {
		r.cfg.Health.Updated(healthStageRules)
	}
	r.cfg.Metrics.PortalRules(len(r.kernel.Set))
	r.cfg.Metrics.NoLocalEndpoints(r.kernel.Dropping())
	r.kick(ctx)
	if r.checkLater && !r.inFlight {
		r.check(ctx)
	}
}
