package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kproxy/kproxy/actors"
)

// ErrChaosRunning refuses a storm while another runs.
var ErrChaosRunning = errors.New("chaos: a storm is already running")

// ChaosCrash is one crash chaos mode made.
type ChaosCrash struct {
	At          time.Time `json:"at"`
	ServicePort string    `json:"servicePort,omitempty"`
	Actor       string    `json:"actor"`
}

// ChaosKinds are the actor kinds a storm can crash.
var ChaosKinds = append(slices.Clone(actors.ServicePortActors), actors.TopActors...)

// Chaos crashes the Portals of random service ports, perSecond × d of
// them spread evenly over d (or until ctx ends), choosing with a rand seeded by seed so
// a run can be repeated. It returns the crashes it made.
func (i *Injector) Chaos(ctx context.Context, perSecond float64, d time.Duration, seed uint64) ([]ChaosCrash, error) {
	return i.Storm(ctx, perSecond, d, seed, []string{"portal"})
}

// Storm is Chaos over the given actor kinds (see ChaosKinds): each crash
// picks a kind, then, for a service port's actor, a service port that has
// one.
func (i *Injector) Storm(ctx context.Context, perSecond float64, d time.Duration, seed uint64, kinds []string) ([]ChaosCrash, error) {
	if len(kinds) == 0 {
		return nil, errors.New("chaos: no actor kinds")
	}
	for _, k := range kinds {
		if !slices.Contains(ChaosKinds, k) {
			return nil, fmt.Errorf("chaos: actor kind %q: want one of %v", k, ChaosKinds)
		}
		if k == "rules" && i.p.RulesPID == nil {
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
	if !i.chaosRunning.CompareAndSwap(false, true) {
		return nil, ErrChaosRunning
	}
	defer i.chaosRunning.Store(false)
	snap, err := i.p.State(5 * time.Second)
	if err != nil {
		return nil, err
	}
	ports := snap.GetServicePorts()
	if len(ports) == 0 {
		return nil, errors.New("chaos: no service ports")
	}
	i.cfg.Log.Warn().Float64("perSecond", perSecond).Dur("duration", d).Uint64("seed", seed).Int("servicePorts", len(ports)).Msg("chaos started")
	rng := rand.New(rand.NewPCG(seed, seed))
	// Crashes follow a schedule, not a ticker: a ticker drops the ticks a
	// busy process misses, so a storm asked for 20/s for 10 s could make
	// far fewer than 200. Late crashes are made at once, catching up.
	total := int(perSecond * d.Seconds())
	interval := time.Duration(float64(time.Second) / perSecond)
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var crashes []ChaosCrash
	for n := range total {
		if wait := time.Until(start.Add(time.Duration(n+1) * interval)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return crashes, ctx.Err()
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return crashes, ctx.Err()
		}
		kind := kinds[rng.IntN(len(kinds))]
		if slices.Contains(actors.TopActors, kind) {
			if i.CrashTop(kind, "chaos") == nil {
				crashes = append(crashes, ChaosCrash{At: time.Now(), Actor: kind})
			}
			continue
		}
		st := ports[rng.IntN(len(ports))]
		// The one refusal: an affinity crash where the service port
		// has no Affinity actor.
		if i.crashIn(st, kind, "chaos") == nil {
			crashes = append(crashes, ChaosCrash{At: time.Now(), ServicePort: st.GetKey().ID(), Actor: kind})
		}
	}
	i.cfg.Log.Warn().Int("crashes", len(crashes)).Msg("chaos ended")
	return crashes, nil
}
