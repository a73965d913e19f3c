package harness

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"
)

// runChurn moves S services' endpoints at R changes per second through
// the file source while a paced load runs over all of them, and measures
// each change's latency from the rewritten file to the first connection
// that reaches the new endpoint.
func runChurn(ctx context.Context, e *env, res *ScenarioResult) error {
	o := e.o
	src := o.ChurnSource
	switch {
	case src != nil:
	case o.ChurnVia == ChurnRemote:
		r, err := startRemoteChurn(ctx, e, o.Services)
		if err != nil {
			return err
		}
		defer r.stop()
		src = r
	default:
		f, err := newFileChurn(e, o.Services, 100)
		if err != nil {
			return err
		}
		src = f
	}
	pool, addrs := src.Pool(), src.Addrs()
	owner := make([]int, len(addrs)) // index into pool of each service's one endpoint
	for i := range owner {
		owner[i] = i % len(pool)
	}
	kp, _, err := startKproxySource(o, o.current(), e.dir, src.KproxyArgs(), false)
	if err != nil {
		return err
	}
	defer kp.Stop()
	smp := startSampler(time.Now(), e.live, timelineInterval(o.Duration), kp)
	defer func() { res.Timeline = smp.stop() }()
	kt := target{name: TargetKproxy, proc: kp, addrs: addrs}
	if _, err := e.awaitReady(ctx, kt, ModeConn, time.Now()); err != nil {
		return err
	}

	// Traffic through every service meanwhile; its failures are counted.
	type loadOut struct {
		r     *loadResult
		round Round
		err   error
	}
	loadDone := make(chan loadOut, 1)
	self0, selfErr := ProcessCPU(os.Getpid())
	go func() {
		r, round, err := e.loadRound(ctx, kt, loadSpec{Mode: ModeConn, Clients: o.Clients, Duration: o.Duration, Size: o.Size, Rate: o.LoadRate, MaxOps: o.MaxRequests},
			fmt.Sprintf("churn: %d services, %.0f changes/s", len(addrs), o.ChurnRate))
		loadDone <- loadOut{r, round, err}
	}()

	d := &ChurnDetail{Source: src.Name(), Changes: max(1, int(o.ChurnRate*o.Duration.Seconds()))}
	var mu sync.Mutex
	gen := make([]int, len(addrs))
	hist := newHist()
	perSecond := map[int]float64{}
	var wg sync.WaitGroup
	probers := o.ChurnProbers
	if probers <= 0 {
		probers = churnProbersFor(o.ChurnRate)
	}
	probes := startProber(ctx, d.Changes, probers)
	// Changes are made on schedule, each in its own goroutine (an API
	// write takes milliseconds; one after another would cap the rate),
	// at most maxInFlight at once, as a controller's workers would (more
	// only slow the API server sharing this machine), and in order per
	// service.
	const maxInFlight = 16
	sem := make(chan struct{}, maxInFlight)
	last := make([]chan struct{}, len(addrs)) // closed when the service's latest change is written
	var setErr error
	// Change k is due at begin + k/R: a ticker drops the ticks a busy
	// driver misses, so on a loaded machine it makes far fewer changes than
	// asked; a schedule makes the late ones at once instead.
	every := time.Duration(float64(time.Second) / o.ChurnRate)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	begin := time.Now()
	made := 0
	for ; made < d.Changes; made++ {
		mu.Lock()
		failed := setErr != nil
		mu.Unlock()
		if failed {
			break
		}
		if wait := time.Until(begin.Add(time.Duration(made+1) * every)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			mu.Lock()
			setErr = cmp.Or(setErr, ctx.Err())
			mu.Unlock()
			break
		}
		i := made % len(addrs)
		owner[i] = (owner[i] + 1) % len(pool)
		want := pool[owner[i]]
		mu.Lock()
		gen[i]++
		g := gen[i]
		mu.Unlock()
		prev, written := last[i], make(chan struct{})
		last[i] = written
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if prev != nil {
				<-prev
			}
			err := src.Set(ctx, i, want)
			// The change exists once written: latency counts from there,
			// not from the time the API server took to store it.
			changed := time.Now()
			close(written)
			<-sem
			if err != nil {
				mu.Lock()
				setErr = cmp.Or(setErr, err)
				d.NotApplied++
				mu.Unlock()
				return
			}
			second := int(changed.Sub(begin).Seconds())
			probes.add(&pendingChange{addr: kt.addrs[i], want: want, changed: changed,
				stale: func() bool {
					mu.Lock()
					defer mu.Unlock()
					return gen[i] != g
				},
				done: func(lat time.Duration, oc outcome) {
					mu.Lock()
					defer mu.Unlock()
					switch oc {
					case applied:
						d.Applied++
						hist.RecordValue(max(lat.Microseconds(), 1))
						perSecond[second] = max(perSecond[second], float64(lat.Microseconds())/1000)
					case superseded:
						d.Superseded++
					default:
						d.NotApplied++
					}
				}})
		}()
	}
	achieved := float64(made) / time.Since(begin).Seconds()
	d.Changes, d.MadePerSecond = made, achieved
	wg.Wait()
	perr := probes.wait(ctx)
	out := <-loadDone
	if perr != nil {
		return perr
	}
	if setErr != nil {
		return setErr
	}
	if out.err != nil {
		return out.err
	}
	// The harness's own CPU: load, probes and the changes' making (with
	// the remote churn, the core's work too).
	if self1, err := ProcessCPU(os.Getpid()); err == nil && selfErr == nil {
		res.Figures = append(res.Figures, figure(fmt.Sprintf("%s source, %d services, %.0f changes/s: harness's CPU", src.Name(), len(addrs), o.ChurnRate),
			"s", true, map[string]float64{TargetKproxy: (self1 - self0).Seconds()}))
	}
	if r, ok := src.(*remoteChurn); ok {
		// A backend that fell MaxInFlight deltas behind gets what it
		// missed in one delta: how often that happened says whether
		// kproxy kept up with the deltas.
		c := r.core.Counters()
		res.Figures = append(res.Figures,
			figure(fmt.Sprintf("remote source, %d services, %.0f changes/s: core's deltas sent", len(addrs), o.ChurnRate), "", false, map[string]float64{TargetKproxy: float64(c.Deltas.Load())}),
			figure(fmt.Sprintf("remote source, %d services, %.0f changes/s: core's resyncs (snapshots to a backend behind)", len(addrs), o.ChurnRate), "", true, map[string]float64{TargetKproxy: float64(c.Resyncs.Load())}))
	}
	d.Latency = curve(TargetKproxy, "change-to-applied", hist)
	d.Requests, d.FailedReqs, d.ErrorSamples = out.r.Ops, out.r.Errors, out.r.ErrSamples
	seconds := make([]int, 0, len(perSecond))
	for s := range perSecond {
		seconds = append(seconds, s)
	}
	slices.Sort(seconds)
	for _, s := range seconds {
		d.PerSecond = append(d.PerSecond, ChurnSeconds{Second: s, Max: perSecond[s]})
	}
	res.Churn = d
	res.Rounds = append(res.Rounds, out.round)
	k := func(v float64) map[string]float64 { return map[string]float64{TargetKproxy: v} }
	label := fmt.Sprintf("%s source, %d services, %.0f changes/s: ", src.Name(), len(addrs), o.ChurnRate)
	ms := func(q float64) float64 { return float64(hist.ValueAtQuantile(q)) / 1000 }
	res.Figures = append(res.Figures,
		figure(label+"changes made per second", "/s", false, k(achieved)),
		figure(label+"change→applied p50", "ms", true, k(ms(50))),
		figure(label+"change→applied p99", "ms", true, k(ms(99))),
		figure(label+"change→applied max", "ms", true, k(ms(100))),
		figure(label+"changes not applied in 30 s", "", true, k(float64(d.NotApplied))),
		figure(label+"requests meanwhile", "", false, k(float64(d.Requests))),
		figure(label+"failed requests", "", true, k(float64(d.FailedReqs))),
		figure(label+"CPU", "s", true, k(out.round.CPUSeconds)),
		figure(label+"probe connections per change applied", "", true, k(float64(probes.probes.Load())/float64(max(d.Applied, 1)))))
	res.Notes = append(res.Notes, fmt.Sprintf("change→applied: from the change written (the file renamed into place, or the API update answered) to the first connection that reaches the new endpoint; %d probing clients take pending changes in turn, pausing %v after a probe that did not see its change, so probing adds a bounded load however many changes are pending", probers, churnProbePause))
	// kproxy's own view where the source carries trigger times (the API
	// server's EndpointSlices): from the change's trigger time to the flush
	// that applies it, bucketed, so upper bounds.
	if bs, err := kp.scrapeHistogram(ctx, httpClient, "kubeproxy_network_programming_duration_seconds"); err == nil {
		if p50 := bucketQuantile(bs, 0.5); !math.IsNaN(p50) {
			p99 := bucketQuantile(bs, 0.99)
			res.Figures = append(res.Figures,
				figure(label+"kproxy's network programming p50 (bucket bound)", "ms", true, k(p50*1000)),
				figure(label+"kproxy's network programming p99 (bucket bound)", "ms", true, k(finite(p99)*1000)))
		}
	}
	e.logf("  churn: %d changes, %d applied (p50 %.1f ms, p99 %.1f ms, max %.1f ms), %d superseded, %d not applied; %d requests, %d failed",
		d.Changes, d.Applied, ms(50), ms(99), ms(100), d.Superseded, d.NotApplied, d.Requests, d.FailedReqs)
	return nil
}
