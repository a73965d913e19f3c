package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// runPorts loads N service ports with C clients in each mode, against
// kproxy and what it is compared with, in interleaved rounds.
func runPorts(ctx context.Context, e *env, res *ScenarioResult) error {
	o := e.o
	if o.hasMode(ModeClose) { // before the services, which name the servers' port
		stop, err := e.backends.startHTTP(ctx, o.Nginx, e.dir)
		if err != nil {
			return err
		}
		defer stop()
		e.logf("close: the endpoints are %s, port %d on each backend IP", e.backends.HTTPServer, e.backends.HTTPPort)
		res.Notes = append(res.Notes, closeNote(e.backends.HTTPServer))
	}
	// kproxy, and the baseline kproxy when compared: each on its own
	// addresses, in every mode.
	type running struct {
		k kproxyBinary
		p *Proc
	}
	var kps []running
	var procs []*Proc
	for _, k := range o.kproxies() {
		m, err := e.writeServicesFor(k, "manifests", o.Ports, o.Modes)
		if err != nil {
			return err
		}
		kp, _, err := startKproxy(o, k, e.dir, m.dir, false)
		if err != nil {
			return err
		}
		defer kp.Stop()
		procs = append(procs, kp)
		kps = append(kps, running{k, kp})
	}
	var err error
	tcpModes := slices.DeleteFunc(slices.Clone(o.Modes), func(m string) bool { return m == ModeUDP })
	// The HAProxies (they proxy no UDP), as targets of the TCP modes.
	var haproxies []func(mode string) target
	for _, peer := range o.haproxyPeers() {
		if len(tcpModes) == 0 {
			break
		}
		if peer.minimal {
			continue // one backend for every port: not a service proxy's balancing (startup only)
		}
		hp, err := startHAProxy(o.HAProxy, e.dir, peer, o.Ports, e.backends, o.Modes)
		if err != nil {
			return err
		}
		defer hp.Stop()
		procs = append(procs, hp)
		haproxies = append(haproxies, func(mode string) target {
			return target{name: peer.name, proc: hp, addrs: serviceAddrs(peer.net, o.Ports, mode)}
		})
	}
	var relay *Proc
	if o.compares(TargetRelay) && o.hasMode(ModeUDP) {
		if relay, err = startRelay(o, e.dir, o.Ports, e.backends); err != nil {
			return err
		}
		defer relay.Stop()
		procs = append(procs, relay)
	}
	kernel, err := startKernel(ctx, o, e.backends)
	if err != nil {
		return err
	}
	if kernel != nil {
		defer kernel()
	} else if o.compares(TargetKernel) {
		res.Notes = append(res.Notes, "kernel: skipped, its nftables rules need root")
	}
	var nginx *Proc
	if o.compares(TargetNginx) && o.hasMode(ModeUDP) {
		if nginx, err = startNginx(o.Nginx, e.dir, o.Ports, e.backends); err != nil {
			return err
		}
		defer nginx.Stop()
		procs = append(procs, nginx)
	}
	plan := time.Duration(len(o.Modes)*o.Rounds*(1+len(o.Compare))) * o.Duration
	smp := startSampler(time.Now(), e.live, timelineInterval(plan), procs...)
	defer func() { res.Timeline = smp.stop() }()

	for _, mode := range o.Modes {
		for _, r := range kps {
			if _, err := e.awaitReady(ctx, r.k.target(r.p, o.Ports, mode), mode, time.Now()); err != nil {
				return err
			}
		}
		for _, hp := range haproxies {
			if mode == ModeUDP {
				break
			}
			if _, err := e.awaitReady(ctx, hp(mode), mode, time.Now()); err != nil {
				return err
			}
		}
		if relay != nil && mode == ModeUDP {
			if _, err := e.awaitReady(ctx, target{name: TargetRelay, proc: relay, addrs: serviceAddrs(relayNet, o.Ports, mode)}, mode, time.Now()); err != nil {
				return err
			}
		}
		if nginx != nil && mode == ModeUDP {
			if _, err := e.awaitReady(ctx, target{name: TargetNginx, proc: nginx, addrs: serviceAddrs(nginxNet, o.Ports, mode)}, mode, time.Now()); err != nil {
				return err
			}
		}
	}
	for _, mode := range o.Modes {
		var targets []target
		for _, r := range kps {
			targets = append(targets, r.k.target(r.p, o.Ports, mode))
		}
		if o.compares(TargetDirect) {
			targets = append(targets, target{name: TargetDirect, addrs: directAddrs(e.backends, o.Ports, mode)})
		}
		if kernel != nil {
			targets = append(targets, target{name: TargetKernel, addrs: serviceAddrs(kernelNet, o.Ports, mode)})
		}
		for _, hp := range haproxies {
			if mode != ModeUDP {
				targets = append(targets, hp(mode))
			}
		}
		if relay != nil && mode == ModeUDP {
			targets = append(targets, target{name: TargetRelay, proc: relay, addrs: serviceAddrs(relayNet, o.Ports, mode)})
		}
		if nginx != nil && mode == ModeUDP {
			targets = append(targets, target{name: TargetNginx, proc: nginx, addrs: serviceAddrs(nginxNet, o.Ports, mode)})
		}
		label := mode
		if mode == ModeClose { // the table says which server served
			label = fmt.Sprintf("%s (%s)", mode, e.backends.HTTPServer)
		}
		if err := e.portsMode(ctx, res, mode, o.Clients, label, targets); err != nil {
			return err
		}
		if mode == ModeUDP {
			continue
		}
		for _, c := range o.ClientSweep {
			if err := e.portsMode(ctx, res, mode, c, fmt.Sprintf("%s, %d clients", label, c), targets); err != nil {
				return err
			}
		}
	}
	for _, p := range procs {
		if pt, err := procFigures(p); err == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("%s after the load: RSS %.1f MiB, %d fds, %d threads, %d goroutines",
				p.Name, float64(pt.RSS)/(1<<20), pt.FDs, pt.Threads, pt.Goroutines))
		}
	}
	if o.hasMode(ModeBulk) {
		res.Notes = append(res.Notes, fmt.Sprintf("bulk: each client streams to a sink over one connection; a request is %d MiB written", bulkOp>>20))
	}
	return nil
}

// closeNote says who served the close mode.
func closeNote(server string) string {
	where := "one nginx process, one worker, listening on every endpoint's IP"
	if server == httpServerGo {
		where = "Go's net/http in the harness's process (nginx is not installed)"
	}
	return "close: a connection per HTTP/1.1 request with Connection: close, the server closing first: " + where
}

// portsMode runs a warm-up and the rounds of one mode with clients
// concurrent clients, the targets' order rotating each round so drift on
// the machine hits each alike. label names its figures ("conn", or "conn,
// 256 clients" in a sweep).
func (e *env) portsMode(ctx context.Context, res *ScenarioResult, mode string, clients int, label string, targets []target) error {
	o := e.o
	spec := loadSpec{Mode: mode, Clients: clients, Size: o.Size, PerConn: o.PerConn, Burst: o.UDPBurst, GSO: o.UDPGSO, MaxOps: o.MaxRequests}
	g, err := e.interleave(ctx, res, label, spec, targets, func(t target, r int, round Round) {
		e.logf("  %s %-8s round %d: %8.0f req/s  %6.1f µs CPU/req  %d failed", label, t.name, r+1, round.OpsPerSecond, round.CPUMicrosPerOp, round.Errors)
	})
	if err != nil {
		return err
	}
	hists, rates, cpus, failed := g.hists, g.rates, g.cpus, g.failed
	rate, cpu, p50, p99 := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	machine := map[string]float64{}
	for _, t := range targets {
		rate[t.name] = median(rates[t.name])
		if len(cpus[t.name]) > 0 {
			cpu[t.name] = median(cpus[t.name])
		}
		if len(g.machine[t.name]) > 0 {
			machine[t.name] = median(g.machine[t.name])
		}
		h := hists[t.name]
		p50[t.name] = float64(h.ValueAtQuantile(50))
		p99[t.name] = float64(h.ValueAtQuantile(99))
		res.Latency = append(res.Latency, curve(t.name, label, h))
	}
	if mode == ModeBulk { // a request is bulkOp bytes: report bits and CPU per GiB
		scale := func(v map[string]float64, f float64) map[string]float64 {
			out := map[string]float64{}
			for k, x := range v {
				out[k] = x * f
			}
			return out
		}
		res.Figures = append(res.Figures,
			figure(label+": throughput", "Gbit/s", false, scale(rate, bulkOp*8/1e9)),
			figure(label+": CPU per GiB", "ms", true, scale(cpu, (1<<30)/bulkOp/1000)),
			figure(label+": machine CPU per GiB", "ms", true, scale(machine, (1<<30)/bulkOp/1000)),
			figure(label+": failed writes", "", true, failed))
		return nil
	}
	res.Figures = append(res.Figures,
		figure(label+": requests/s", "req/s", false, rate),
		figure(label+": CPU per request", "µs", true, cpu),
		figure(label+": machine CPU per request", "µs", true, machine),
		figure(label+": latency p50", "µs", true, p50),
		figure(label+": latency p99", "µs", true, p99),
		figure(label+": failed requests", "", true, failed))
	return nil
}

// writeServices writes n services with ports for the load modes and
// the first M backends as endpoints, 1,000 services to a file, on the
// addresses of the kproxy under test.
func (e *env) writeServices(n int, modes []string) (*manifests, error) {
	return e.writeServicesFor(e.o.current(), "manifests", n, modes)
}

// writeServicesFor writes them on k's addresses into the directory name
// (name-baseline for the baseline).
func (e *env) writeServicesFor(k kproxyBinary, name string, n int, modes []string) (*manifests, error) {
	if k.name != TargetKproxy {
		name += "-" + k.name
	}
	dir := filepath.Join(e.dir, name)
	b := e.backends
	toHTTP := slices.Contains(modes, ModeClose)
	if toHTTP && b.HTTPPort == 0 {
		return nil, errors.New("close mode's services: the HTTP servers are not running")
	}
	m := &manifests{dir: dir, perFile: 1000, tcpPort: b.TCPPort, udpPort: b.UDPPort, sinkPort: b.SinkPort, httpPort: b.HTTPPort}
	eps := b.IPs[:min(e.o.Endpoints, len(b.IPs))]
	tcp := slices.Contains(modes, ModeKeepAlive) || slices.Contains(modes, ModeConn)
	for i := range n {
		m.services = append(m.services, service{IP: hostIP(k.net, i), TCP: tcp, UDP: slices.Contains(modes, ModeUDP),
			Bulk: slices.Contains(modes, ModeBulk), HTTP: toHTTP, Endpoints: eps})
	}
	return m, m.writeAll()
}
