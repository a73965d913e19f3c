package actors

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/rules"
)

// Roles that fault injection can crash.
var crashableRoles = map[string]bool{rolePortal: true, roleBalancer: true, roleAffinity: true, roleServicePort: true}

// Top actors, crashable on their own (no service port).
const (
	roleWatcher = "watcher"
	roleProxier = "proxier"
	roleRules   = "rules"
)

// CrashTop makes one of the top actors (watcher, proxier, rules) panic.
func (p *Proxy) CrashTop(role, reason string) error {
	pid := map[string]*actor.PID{roleWatcher: p.Watcher, roleProxier: p.Proxier, roleRules: p.RulesPID}[role]
	if pid == nil {
		return fmt.Errorf("crash %s: no such actor here (want watcher, proxier, or rules in a kernel portal mode)", role)
	}
	p.faults.Add(1)
	p.cfg.Metrics.Fault("crash")
	p.cfg.Log.Warn().Str("actor", role).Str("reason", reason).Msg("fault injected: crash")
	p.System.Root.Send(pid, &messages.InjectCrash{Reason: reason})
	return nil
}

// ErrUnknownServicePort is returned for a service port the Proxier does not have.
var ErrUnknownServicePort = errors.New("unknown service port")

// Crash makes one actor of a service port panic: role is portal, balancer,
// affinity or serviceport. The fault is logged and counted.
func (p *Proxy) Crash(servicePort, role, reason string) error {
	if !crashableRoles[role] {
		return fmt.Errorf("crash %s: unknown actor %q (want portal, balancer, affinity or serviceport)", servicePort, role)
	}
	st, err := p.servicePortState(servicePort)
	if err != nil {
		return fmt.Errorf("crash %w", err)
	}
	if role == roleAffinity && st.GetServicePort().GetSessionAffinity() != messages.SessionAffinity_CLIENT_IP {
		return fmt.Errorf("crash %s: no affinity actor (sessionAffinity is not ClientIP)", servicePort)
	}
	p.crash(st, role, reason)
	return nil
}

func (p *Proxy) crash(st *messages.ServicePortState, role, reason string) {
	id := st.GetActorId()
	if role != roleServicePort {
		id = childID(id, role)
	}
	p.faults.Add(1)
	p.cfg.Metrics.Fault("crash")
	p.cfg.Log.Warn().Str("servicePort", st.GetKey().ID()).Str("actor", role).Str("reason", reason).Msg("fault injected: crash")
	p.System.Root.Send(actor.NewPID(p.System.Address(), id), &messages.InjectCrash{Reason: reason})
}

// SetEndpointFault makes dials to endpoint ("ip:port") fail or stall for d.
// It needs Config.Faults.
func (p *Proxy) SetEndpointFault(endpoint, mode string, d time.Duration) error {
	if p.cfg.Faults == nil {
		return errors.New("endpoint faults: fault injection is not enabled")
	}
	if err := p.cfg.Faults.Set(endpoint, mode, d); err != nil {
		return err
	}
	p.faults.Add(1)
	p.cfg.Metrics.Fault("endpoint")
	p.cfg.Log.Warn().Str("endpoint", endpoint).Str("mode", mode).Dur("duration", d).Msg("fault injected: endpoint")
	return nil
}

// SetRulesFault makes kernel rule transactions (and presence checks) fail
// for d. It needs Config.Faults and a kernel portal mode.
func (p *Proxy) SetRulesFault(d time.Duration) error {
	return p.rulesFault(func(f *rules.Faulty) { f.FailFor(d) }, fmt.Sprintf("for %v", d))
}

// FailRules makes the next n kernel rule transactions fail, as a kernel
// that refuses a change would. It needs Config.Faults and a kernel mode.
func (p *Proxy) FailRules(n int) error {
	return p.rulesFault(func(f *rules.Faulty) { f.FailNext(n) }, fmt.Sprintf("the next %d transactions", n))
}

func (p *Proxy) rulesFault(inject func(*rules.Faulty), what string) error {
	if p.cfg.rulesFaults == nil {
		return errors.New("rules faults: fault injection is not enabled, or the portal mode has no kernel rules")
	}
	inject(p.cfg.rulesFaults)
	p.faults.Add(1)
	p.cfg.Metrics.Fault("rules")
	p.cfg.Log.Warn().Str("fault", what).Msg("fault injected: kernel rules")
	// Without a change nothing would try: check now, as the periodic check would.
	p.System.Root.Send(p.RulesPID, &messages.CheckRules{})
	return nil
}

// ErrChaosRunning refuses a storm while another runs.
var ErrChaosRunning = errors.New("chaos: a storm is already running")

// ChaosCrash is one crash chaos mode made.
type ChaosCrash struct {
	At          time.Time `json:"at"`
	ServicePort string    `json:"servicePort,omitempty"`
	Actor       string    `json:"actor"`
}

// ChaosKinds are the actor kinds a storm can crash.
var ChaosKinds = []string{rolePortal, roleBalancer, roleAffinity, roleServicePort, roleWatcher, roleProxier, roleRules}

// Chaos crashes the Portals of random service ports, perSecond of them each
// second, for d (or until ctx ends), choosing with a rand seeded by seed so
// a run can be repeated. It returns the crashes it made.
func (p *Proxy) Chaos(ctx context.Context, perSecond float64, d time.Duration, seed uint64) ([]ChaosCrash, error) {
	return p.Storm(ctx, perSecond, d, seed, []string{rolePortal})
}

// Storm is Chaos over the given actor kinds (see ChaosKinds): each crash
// picks a kind, then, for a service port's actor, a service port that has
// one.
func (p *Proxy) Storm(ctx context.Context, perSecond float64, d time.Duration, seed uint64, kinds []string) ([]ChaosCrash, error) {
	if len(kinds) == 0 {
		return nil, errors.New("chaos: no actor kinds")
	}
	for _, k := range kinds {
		if !slices.Contains(ChaosKinds, k) {
			return nil, fmt.Errorf("chaos: actor kind %q: want one of %v", k, ChaosKinds)
		}
		if k == roleRules && p.RulesPID == nil {
			return nil, errors.New("chaos: no rules actor (bind portal)")
		}
	}
	if !(perSecond > 0 && perSecond <= 100) { // also refuses NaN
		return nil, fmt.Errorf("chaos: rate %v: want 0 < rate <= 100 per second", perSecond)
	}
	if d <= 0 || d > 10*time.Minute {
		return nil, fmt.Errorf("chaos: duration %v: want 0 < duration <= 10m", d)
	}
	// One storm at a time: storms could otherwise pile up crashes faster
	// than restarts happen and keep service ports down long after.
	if !p.chaosRunning.CompareAndSwap(false, true) {
		return nil, ErrChaosRunning
	}
	defer p.chaosRunning.Store(false)
	snap, err := p.State(5 * time.Second)
	if err != nil {
		return nil, err
	}
	ports := snap.GetServicePorts()
	if len(ports) == 0 {
		return nil, errors.New("chaos: no service ports")
	}
	p.cfg.Log.Warn().Float64("perSecond", perSecond).Dur("duration", d).Uint64("seed", seed).Int("servicePorts", len(ports)).Msg("chaos started")
	rng := rand.New(rand.NewPCG(seed, seed))
	ticker := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
	defer ticker.Stop()
	end := time.After(d)
	var crashes []ChaosCrash
	for {
		select {
		case <-ctx.Done():
			return crashes, ctx.Err()
		case <-end:
			p.cfg.Log.Warn().Int("crashes", len(crashes)).Msg("chaos ended")
			return crashes, nil
		case <-ticker.C:
			kind := kinds[rng.IntN(len(kinds))]
			if !crashableRoles[kind] {
				if p.CrashTop(kind, "chaos") == nil {
					crashes = append(crashes, ChaosCrash{At: time.Now(), Actor: kind})
				}
				continue
			}
			st := ports[rng.IntN(len(ports))]
			if kind == roleAffinity && st.GetServicePort().GetSessionAffinity() != messages.SessionAffinity_CLIENT_IP {
				continue // no Affinity actor there
			}
			crashes = append(crashes, ChaosCrash{At: time.Now(), ServicePort: st.GetKey().ID(), Actor: kind})
			p.crash(st, kind, "chaos")
		}
	}
}

// FaultCounts are the totals the state view shows.
type FaultCounts struct {
	FaultsInjected int64 `json:"faultsInjected"`
	Restarts       int64 `json:"restarts"`
}

// Counts returns how many faults were injected and actors restarted.
func (p *Proxy) Counts() FaultCounts {
	return FaultCounts{FaultsInjected: p.faults.Load(), Restarts: p.restarts.Load()}
}
