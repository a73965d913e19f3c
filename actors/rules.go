package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

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
	pending    map[string][]rules.Rule // the in-flight batch's desired rules
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	timers     *scheduler.TimerScheduler
	stopTick   scheduler.CancelFunc
}

// programmed is the Rules actor's state that outlives its incarnations:
// the desired rules, which no one else holds whole, and what is known to
// be programmed. A new incarnation starts with a full sync.
type programmed struct {
	desired map[string][]rules.Rule // by service port ID
	applied map[string][]rules.Rule // as last programmed
	dirty   map[string]bool
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
	st := &programmed{desired: map[string][]rules.Rule{}, applied: map[string][]rules.Rule{}, dirty: map[string]bool{}}
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
		r.traced(m.GetServicePort().GetKey().ID(), m.GetTrace())
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

// set records what one service port needs now.
func (r *Rules) set(ctx actor.Context, m *messages.SetPortalRules) {
	id := m.GetServicePort().GetKey().ID()
	rs, err := rules.ForServicePort(m.GetServicePort(), int(m.GetProxyPort()), int(m.GetExternalProxyPort()), m.GetInternal(), m.GetExternal())
	if err != nil {
		r.cfg.Log.Warn().Err(err).Str("servicePort", id).Msg("no portal rules")
	}
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
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ok, err := r.rules.Present(r.ctx)
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
	r.pending = make(map[string][]rules.Rule, len(r.dirty))
	var upserts, removals []rules.Rule
	if full {
		for id, rs := range r.desired {
			r.pending[id] = rs
		}
		upserts = r.flatten(r.pending)
	} else {
		for id := range r.dirty {
			r.pending[id] = r.desired[id]
		}
		upserts = r.flatten(r.pending)
		keep := map[rules.Key]bool{}
		for _, u := range upserts {
			keep[u.Key()] = true
		}
		for id := range r.dirty {
			for _, old := range r.applied[id] {
				if !keep[old.Key()] {
					removals = append(removals, old)
				}
			}
		}
	}
	stale := r.staleFlows(full, upserts, removals)
	r.dirty = map[string]bool{}
	r.needSync = false
	r.inFlight = true
	self, root, batch := ctx.Self(), ctx.ActorSystem().Root, r.batch
	span := r.transactionSpan(full, batch, len(upserts), len(removals))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var err error
		start := time.Now()
		if full {
			err = r.rules.Sync(r.ctx, upserts)
		} else {
			err = r.rules.Apply(r.ctx, upserts, removals)
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
	was := map[rules.Key]rules.Rule{}
	if !full {
		for id := range r.pending {
			for _, old := range r.applied[id] {
				was[old.Key()] = old
			}
		}
	}
	var out []rules.Rule
	for _, u := range upserts {
		old, ok := was[u.Key()]
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
// logging) rules whose key another service port holds.
func (r *Rules) flatten(set map[string][]rules.Rule) []rules.Rule {
	out, clashes := rules.Flatten(set, r.applied)
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
		r.applied = map[string][]rules.Rule{}
	}
	for id, rs := range r.pending {
		if len(rs) == 0 {
			delete(r.applied, id)
		} else {
			r.applied[id] = rs
		}
	}
	ev := r.cfg.Log.Debug()
	if m.GetFullSync() {
		ev = r.cfg.Log.Info() // start, recovery: worth seeing; batches are not
	}
	ev.Int64("batch", m.GetBatch()).Bool("fullSync", m.GetFullSync()).Int("servicePorts", len(r.pending)).Msg("kernel portal rules programmed")
	if !r.needSync && len(r.dirty) == 0 {
		r.cfg.Health.Updated(healthStageRules)
	}
	n, dropInternal, dropExternal := 0, 0, 0
	for _, rs := range r.applied {
		n += len(rs)
		in, ex := false, false
		for _, rule := range rs {
			in = in || rule.Drop && rule.ClusterIP
			ex = ex || rule.Drop && !rule.ClusterIP
		}
		if in {
			dropInternal++
		}
		if ex {
			dropExternal++
		}
	}
	r.cfg.Metrics.PortalRules(n)
	r.cfg.Metrics.NoLocalEndpoints(dropInternal, dropExternal)
	r.kick(ctx)
	if r.checkLater && !r.inFlight {
		r.check(ctx)
	}
}
