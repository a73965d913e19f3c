package harness

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// runChaos loads N service ports (a connection per request, so every
// request needs a listening portal and a balancer) for one round without
// faults and one during a crash storm through the admin API, and counts
// failures on the ports the storm crashed apart from the untouched ones.
func runChaos(ctx context.Context, e *env, res *ScenarioResult) error {
	o := e.o
	m, err := e.writeServices(o.Ports, []string{ModeConn})
	if err != nil {
		return err
	}
	kp, adm, err := startKproxy(o, o.current(), e.dir, m.dir, true)
	if err != nil {
		return err
	}
	defer kp.Stop()
	smp := startSampler(time.Now(), e.live, timelineInterval(2*o.Duration), kp)
	defer func() { res.Timeline = smp.stop() }()
	kt := target{name: TargetKproxy, proc: kp, addrs: serviceAddrs(kproxyNet, o.Ports, ModeConn)}
	if _, err := e.awaitReady(ctx, kt, ModeConn, time.Now()); err != nil {
		return err
	}
	spec := loadSpec{Mode: ModeConn, Clients: o.Clients, Duration: o.Duration, Size: o.Size, Rate: o.LoadRate, MaxOps: o.MaxRequests}
	_, calm, err := e.loadRound(ctx, kt, spec, "chaos: without faults")
	if err != nil {
		return err
	}
	calm.Mode = "calm"
	type stormOut struct {
		crashes []stormCrash
		err     error
	}
	stormDone := make(chan stormOut, 1)
	go func() {
		c, err := adm.storm(ctx, o.ChaosRate, o.Duration, o.Seed, o.ChaosKinds)
		stormDone <- stormOut{c, err}
	}()
	lr, stormy, err := e.loadRound(ctx, kt, spec, fmt.Sprintf("chaos: %.0f crashes/s of %s", o.ChaosRate, strings.Join(o.ChaosKinds, ",")))
	if err != nil {
		return err
	}
	stormy.Mode = "storm"
	so := <-stormDone
	if so.err != nil {
		return so.err
	}
	res.Rounds = append(res.Rounds, calm, stormy)
	d := &ChaosDetail{Crashes: len(so.crashes), ErrorSamples: lr.ErrSamples}
	crashed := make([]bool, o.Ports)
	for _, c := range so.crashes {
		if c.ServicePort == "" {
			d.TopCrashes++
			continue
		}
		// "bench/svc-00012:tcp/TCP"
		name, _, _ := strings.Cut(strings.TrimPrefix(c.ServicePort, "bench/"), ":")
		if i, ok := serviceIndex(name); ok && i < o.Ports {
			crashed[i] = true
		}
	}
	for i := range o.Ports {
		if crashed[i] {
			d.CrashedPorts++
			d.RequestsCrashed += lr.OK[i] + lr.Failed[i]
			d.FailedCrashed += lr.Failed[i]
		} else {
			d.UntouchedPorts++
			d.RequestsUntouched += lr.OK[i] + lr.Failed[i]
			d.FailedUntouched += lr.Failed[i]
		}
	}
	res.Chaos = d
	k := func(v float64) map[string]float64 { return map[string]float64{TargetKproxy: v} }
	label := fmt.Sprintf("%d ports, %.0f crashes/s: ", o.Ports, o.ChaosRate)
	res.Figures = append(res.Figures,
		figure(label+"requests/s without faults", "req/s", false, k(calm.OpsPerSecond)),
		figure(label+"requests/s during the storm", "req/s", false, k(stormy.OpsPerSecond)),
		figure(label+"crashes", "", false, k(float64(d.Crashes))),
		figure(label+"ports crashed", "", false, k(float64(d.CrashedPorts))),
		figure(label+"failed on crashed ports", "", true, k(float64(d.FailedCrashed))),
		figure(label+"failed on untouched ports", "", true, k(float64(d.FailedUntouched))),
		figure(label+"failed without faults", "", true, k(float64(calm.Errors))))
	e.logf("  chaos: %d crashes on %d ports (%d top-level); failed %d of %d on crashed ports, %d of %d on untouched ports; %.0f req/s calm, %.0f during the storm",
		d.Crashes, d.CrashedPorts, d.TopCrashes, d.FailedCrashed, d.RequestsCrashed, d.FailedUntouched, d.RequestsUntouched, calm.OpsPerSecond, stormy.OpsPerSecond)
	return nil
}
