package harness

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// listenScanInterval is how often /proc/net/tcp is read while ports come
// up: fine enough for startup figures, rare enough that reading a table
// of thousands of sockets costs the machine little.
const listenScanInterval = 25 * time.Millisecond

// perPort is (RSS with n ports - RSS with one) / (n-1), in KiB.
func perPort(base, rss map[string]float64, n int) map[string]float64 {
	out := map[string]float64{}
	for name, b := range base {
		if r, ok := rss[name]; ok && n > 1 {
			out[name] = (r - b) / float64(n-1) / 1024
		}
	}
	return out
}

// idleFigures are p's sizes after d without traffic: waiting out d is what
// makes the ports idle (kproxy parks a listener after a while without
// connections), not a wait for an event.
func idleFigures(ctx context.Context, p *Proc, d time.Duration) (ProcPoint, error) {
	select {
	case <-ctx.Done():
		return ProcPoint{}, ctx.Err()
	case <-time.After(d):
	}
	return procFigures(p)
}

// readyCurve is the sorted times at which ports reached a state.
func readyCurve(target, kind string, times []time.Duration) ReadyCurve {
	s := make([]float64, len(times))
	for i, d := range times {
		s[i] = d.Seconds()
	}
	slices.Sort(s)
	return ReadyCurve{Target: target, Kind: kind, Seconds: s}
}

// runStartup starts kproxy (and HAProxy) on N service ports, Rounds times
// in turn, and measures the time until every port listens and forwards,
// and the process's size once they do.
func runStartup(ctx context.Context, e *env, res *ScenarioResult) error {
	o := e.o
	// The proxies started in turn: kproxy, the baseline kproxy and HAProxy
	// when compared, each with its manifests for N ports and for one.
	var names []string
	kps := map[string]kproxyBinary{}
	manifestsN, manifests1 := map[string]string{}, map[string]string{}
	for _, k := range o.kproxies() {
		names = append(names, k.name)
		kps[k.name] = k
		m, err := e.writeServicesFor(k, "manifests", o.Ports, []string{ModeConn})
		if err != nil {
			return err
		}
		manifestsN[k.name] = m.dir
		if o.Ports > 1 {
			m1, err := e.writeServicesFor(k, "manifests-1", 1, []string{ModeConn})
			if err != nil {
				return err
			}
			manifests1[k.name] = m1.dir
		}
	}
	peers := map[string]haproxyPeer{}
	for _, hp := range o.haproxyPeers() {
		names = append(names, hp.name)
		peers[hp.name] = hp
	}
	start := func(name string, n int) (*Proc, target, error) {
		if k, ok := kps[name]; ok {
			dir := manifestsN[name]
			if n == 1 && o.Ports > 1 {
				dir = manifests1[name]
			}
			p, _, err := startKproxy(o, k, e.dir, dir, false)
			if err != nil {
				return nil, target{}, err
			}
			return p, k.target(p, n, ModeConn), nil
		}
		hp := peers[name]
		p, err := startHAProxy(o.HAProxy, e.dir, hp, n, e.backends, []string{ModeConn})
		if err != nil {
			return nil, target{}, err
		}
		return p, target{name: name, proc: p, addrs: serviceAddrs(hp.net, n, ModeConn)}, nil
	}
	// Each proxy's size with one port: what a port costs is the growth
	// from there, not the size over N (a process has a size of its own).
	base, baseIdle := map[string]float64{}, map[string]float64{}
	if o.Ports > 1 {
		for _, name := range names {
			p, t, err := start(name, 1)
			if err != nil {
				return err
			}
			_, err = e.awaitReady(ctx, t, ModeConn, p.Started())
			if err == nil {
				var pt ProcPoint
				if pt, err = procFigures(p); err == nil {
					base[name] = float64(pt.RSS)
				}
			}
			if err == nil && o.IdleWait > 0 {
				var pt ProcPoint
				if pt, err = idleFigures(ctx, p, o.IdleWait); err == nil {
					baseIdle[name] = float64(pt.RSS)
				}
			}
			p.Stop()
			if err != nil {
				return fmt.Errorf("%s with one port: %w", name, err)
			}
		}
	}
	type sizes struct {
		listen, cpuListen, forward, rss, anonRSS, fds, threads, goroutines, floor []float64
		idleRSS, idleGoroutines                                                   []float64
	}
	got := map[string]*sizes{}
	for r := range o.Rounds {
		for j := range names {
			name := names[(r+j)%len(names)]
			if got[name] == nil {
				got[name] = &sizes{}
			}
			g := got[name]
			p, t, err := start(name, o.Ports)
			if err != nil {
				return err
			}
			var smp *sampler
			if r < len(names) { // the first start of each: its timeline
				smp = startSampler(p.Started(), e.live, 100*time.Millisecond, p)
			}
			e.progress.step(fmt.Sprintf("startup %s: round %d/%d", name, r+1, o.Rounds), 0)
			wctx, stopWatch := context.WithCancel(ctx)
			// The process's CPU time (from /proc) once the last port
			// listens: what starting N ports costs, whatever else runs
			// on the machine.
			cpuListen := -1.0
			watch, werr := watchListeners(wctx, t.addrs, p.Started(), func() {
				if st, err := p.Stat(); err == nil {
					cpuListen = st.CPU.Seconds()
				}
			})
			var order <-chan int
			if werr == nil {
				order = watch.order
			}
			ready, err := e.awaitReadyGated(ctx, t, ModeConn, p.Started(), order)
			if err != nil {
				stopWatch()
				if smp != nil {
					res.Timeline = append(res.Timeline, smp.stop()...)
				}
				p.Stop()
				return err
			}
			// Every port forwards, so every port listens: the watch ends
			// at its next scan.
			listen := ready.Listen
			if werr == nil {
				listen = watch.times()
				if cpuListen >= 0 {
					g.cpuListen = append(g.cpuListen, cpuListen)
				}
			}
			stopWatch()
			pt, err := procFigures(p)
			if err != nil {
				p.Stop()
				return err
			}
			// Probing ports that are all ready again shows the probe's own
			// floor: how long it takes to see N ports at all.
			floorStart := time.Now()
			floor, err := awaitForwarding(ctx, p, t.addrs, ModeConn, floorStart, o.ReadyTimeout, nil)
			if err == nil && o.IdleWait > 0 {
				var ipt ProcPoint
				if ipt, err = idleFigures(ctx, p, o.IdleWait); err == nil {
					g.idleRSS = append(g.idleRSS, float64(ipt.RSS))
					g.idleGoroutines = append(g.idleGoroutines, float64(ipt.Goroutines))
				}
			}
			if smp != nil {
				res.Timeline = append(res.Timeline, smp.stop()...)
			}
			p.Stop()
			if err != nil {
				return fmt.Errorf("%s: probe again or idle: %w", name, err)
			}
			g.listen = append(g.listen, slices.Max(listen).Seconds())
			g.forward = append(g.forward, slices.Max(ready.Forward).Seconds())
			g.floor = append(g.floor, slices.Max(floor.Forward).Seconds())
			g.rss = append(g.rss, float64(pt.RSS))
			if pt.AnonRSS > 0 {
				g.anonRSS = append(g.anonRSS, float64(pt.AnonRSS))
			}
			g.fds = append(g.fds, float64(pt.FDs))
			g.threads = append(g.threads, float64(pt.Threads))
			g.goroutines = append(g.goroutines, float64(pt.Goroutines))
			if r < len(names) {
				res.Ready = append(res.Ready, readyCurve(name, "listening", listen), readyCurve(name, "forwarding", ready.Forward))
			}
			e.logf("  startup %-8s round %d: all listening %.3fs, all forwarding %.3fs, RSS %.1f MiB, %d fds, %d goroutines",
				name, r+1, slices.Max(listen).Seconds(), slices.Max(ready.Forward).Seconds(), float64(pt.RSS)/(1<<20), pt.FDs, pt.Goroutines)
		}
	}
	n := float64(o.Ports)
	vals := func(f func(*sizes) []float64, scale float64) map[string]float64 {
		out := map[string]float64{}
		for name, g := range got {
			if v := median(f(g)); v != 0 {
				out[name] = v * scale
			}
		}
		return out
	}
	label := fmt.Sprintf("%d ports: ", o.Ports)
	res.Figures = append(res.Figures,
		figure(label+"all listening", "s", true, vals(func(g *sizes) []float64 { return g.listen }, 1)),
		figure(label+"CPU until all listening", "s", true, vals(func(g *sizes) []float64 { return g.cpuListen }, 1)),
		figure(label+"all forwarding", "s", true, vals(func(g *sizes) []float64 { return g.forward }, 1)),
		figure(label+"RSS", "MiB", true, vals(func(g *sizes) []float64 { return g.rss }, 1.0/(1<<20))),
		figure(label+"RSS anonymous (without the binary's pages)", "MiB", true, vals(func(g *sizes) []float64 { return g.anonRSS }, 1.0/(1<<20))),
		figure(label+"RSS over N", "KiB", true, vals(func(g *sizes) []float64 { return g.rss }, 1/(1024*n))),
		figure(label+"RSS per port above one port", "KiB", true, perPort(base, vals(func(g *sizes) []float64 { return g.rss }, 1), o.Ports)),
		figure(label+"fds per port", "", true, vals(func(g *sizes) []float64 { return g.fds }, 1/n)),
		figure(label+"threads", "", true, vals(func(g *sizes) []float64 { return g.threads }, 1)),
		figure(label+"goroutines per port", "", true, vals(func(g *sizes) []float64 { return g.goroutines }, 1/n)),
		figure(label+"probe floor (ready ports probed again)", "s", true, vals(func(g *sizes) []float64 { return g.floor }, 1)))
	if o.IdleWait > 0 {
		idle := fmt.Sprintf(", idle %v", o.IdleWait)
		res.Figures = append(res.Figures,
			figure(label+"RSS"+idle, "MiB", true, vals(func(g *sizes) []float64 { return g.idleRSS }, 1.0/(1<<20))),
			figure(label+"RSS per port above one port"+idle, "KiB", true, perPort(baseIdle, vals(func(g *sizes) []float64 { return g.idleRSS }, 1), o.Ports)),
			figure(label+"goroutines per port"+idle, "", true, vals(func(g *sizes) []float64 { return g.idleGoroutines }, 1/n)))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("times are from the process's start until the last port listens (its listening socket as the kernel's sock_diag lists it, asked every %v) and forwards (its first reply from a backend, seen by %d probing clients once the port listens, retrying every %v: an upper bound, since probing N ports takes time of its own, the probe floor: the same probe over ports already up)", listenScanInterval, probeWorkers, retryPause))
	return nil
}
