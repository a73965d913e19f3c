package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/metrics"
	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// watchOptions are kproxy watch's flags: a source, and where its node-local
// view goes on every change (KPNG's kpng-json and kpng-callout).
type watchOptions struct {
	sourceFlags
	json    bool
	callout string
	log     string
	logFmt  string
	// serve makes this a core: the source watched once, each subscribing
	// node's view served over protoactor remoting on this address.
	serve        string
	maxInFlight  int
	maxSnapshots int
	heartbeat    time.Duration
	serveMetrics string
	// apiOutageLimit is how long the API server may not answer before the
	// core's /healthz says unhealthy.
	apiOutageLimit time.Duration
	// uiAddress serves the core's read-only page (with --serve).
	uiAddress          string
	uiAllowNonLoopback bool
	replicas           replicaFlags
}

func watchCommand(args []string, stdout io.Writer) error {
	var o watchOptions
	fs := flag.NewFlagSet("kproxy watch", flag.ContinueOnError)
	o.sourceFlags.register(fs)
	fs.BoolVar(&o.json, "json", false, "print the node-local state as JSON lines (one per service, a blank line after each state) on every change")
	fs.StringVar(&o.callout, "callout", "", "run this shell command on every change with the JSON lines on its standard input")
	fs.StringVar(&o.log, "log-level", "warn", "log level (logs go to standard error)")
	fs.StringVar(&o.logFmt, "log-format", "console", "json or console")
	fs.StringVar(&o.serve, "serve", "", "be a core: watch the source once and serve each subscribing node proxy (kproxy run --source remote:ADDR) its node-local view over protoactor remoting on this host:port (loopback unless --remote-allow-non-loopback)")
	fs.StringVar(&o.serveMetrics, "serve-metrics-address", "", "with --serve: host:port for the core's /metrics (subscriptions, snapshots, deltas, resyncs, client-go) and /healthz; empty turns it off")
	fs.DurationVar(&o.apiOutageLimit, "serve-api-outage-limit", time.Minute, "with --serve and --source kube: /healthz is unhealthy once the API server has not answered for this long (kube-proxy's healthz allows 2 x its 30 s sync period)")
	fs.StringVar(&o.uiAddress, "ui-address", "", "with --serve: host:port for the core's read-only web page (its subscribers, their nodes, deltas sent, lag) at / and its JSON at /api/core; loopback unless --ui-allow-non-loopback; empty turns it off")
	fs.BoolVar(&o.uiAllowNonLoopback, "ui-allow-non-loopback", false, "allow a non-loopback --ui-address (the page then answers any Host)")
	o.replicas.register(fs)
	fs.IntVar(&o.maxInFlight, "serve-max-in-flight", remote.DefaultCoreMaxInFlight, "with --serve: changes a backend may leave unacknowledged; a slower one gets what it missed in one delta once it catches up instead of a growing backlog")
	fs.IntVar(&o.maxSnapshots, "serve-max-snapshots-in-flight", remote.DefaultCoreMaxSnapshotsInFlight, "with --serve: full snapshots sent and not yet acknowledged; further subscriptions wait in turn (thousands of nodes subscribing at once are each served within their lease)")
	fs.DurationVar(&o.heartbeat, "serve-heartbeat", remote.DefaultCoreHeartbeat, "with --serve: how often an idle backend hears from the core (it counts the core lost after 3 silent ones, and the core drops a backend silent for 10); each idle backend costs the core a message and its acknowledgement per interval")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.serve != "" {
		if o.isRemote() {
			return errors.New("--serve needs --source kube or file:PATH")
		}
		if o.nodeZone != "" {
			return errors.New("--serve and --node-zone do not go together: a core serves many nodes, and --node-zone names one node's zone")
		}
		if o.json || o.callout != "" {
			return errors.New("--serve and --json/--callout do not go together")
		}
		if err := o.remote.checkListen("--serve", o.serve); err != nil {
			return err
		}
		if err := o.replicas.validate(&o.remote); err != nil {
			return err
		}
		if o.heartbeat <= 0 || o.maxSnapshots <= 0 {
			return fmt.Errorf("--serve-heartbeat (%v) and --serve-max-snapshots-in-flight (%d) must be positive", o.heartbeat, o.maxSnapshots)
		}
		if o.uiAddress != "" {
			loopback, err := loopbackAddress("--ui-address", o.uiAddress)
			if err != nil {
				return err
			}
			if !loopback && !o.uiAllowNonLoopback {
				return fmt.Errorf("--ui-address %q is not a loopback address; the core's page would be reachable from the network (pass --ui-allow-non-loopback to insist)", o.uiAddress)
			}
		}
		if o.log == "warn" {
			o.log = "info"
		}
	} else if o.uiAddress != "" {
		return errors.New("--ui-address needs --serve: the page shows a core's subscribers")
	} else if o.replicas.provider != "" {
		return errors.New("--serve-cluster needs --serve: replicas are cores")
	}
	if !o.json && o.callout == "" {
		o.json = true
	}
	log, err := newLogger(os.Stderr, o.log, o.logFmt)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.serve != "" {
		return serveCore(ctx, o, log, nil)
	}
	return watch(ctx, o, stdout, log)
}

// serveCore runs a core until ctx ends. started, if set, sees it once it
// serves (tests).
func serveCore(ctx context.Context, o watchOptions, log zerolog.Logger, started func(*remote.Core)) error {
	views, err := o.newNodeViews(log)
	if err != nil {
		return err
	}
	rc, err := o.remote.config(o.serve, log)
	if err != nil {
		return err
	}
	replicas, err := o.replicas.replicas()
	if err != nil {
		return err
	}
	// /healthz answers from the start: unhealthy, saying why, until the
	// source has synced.
	health := &coreHealth{views: views, limit: o.apiOutageLimit}
	if o.serveMetrics != "" {
		serveHTTP(ctx, "core metrics (/metrics, /healthz)", o.serveMetrics, coreHandler(health), log)
	}
	core, err := remote.StartCore(ctx, remote.CoreConfig{Views: views, MinSyncPeriod: o.minSyncPeriod, MaxInFlight: o.maxInFlight, MaxSnapshotsInFlight: o.maxSnapshots, Heartbeat: o.heartbeat,
		Remote: rc, Log: log, Replicas: replicas})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	health.core.Store(core)
	if o.uiAddress != "" {
		serveCoreUI(ctx, o, core, log)
	}
	if started != nil {
		started(core)
	}
	<-ctx.Done()
	core.Stop()
	log.Info().Msg("core stopped")
	return nil
}

// watch emits the state on every change until ctx ends.
func watch(ctx context.Context, o watchOptions, stdout io.Writer, log zerolog.Logger) error {
	var last []byte
	emit := func(state []*messages.ServicePortEndpoints) bool {
		var buf bytes.Buffer
		for _, line := range kpngJSON(state) {
			buf.Write(line)
			buf.WriteByte('\n')
		}
		if bytes.Equal(buf.Bytes(), last) && last != nil {
			return false
		}
		last = bytes.Clone(buf.Bytes())
		if o.json {
			stdout.Write(append(buf.Bytes(), '\n'))
		}
		if o.callout != "" {
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", o.callout)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(buf.Bytes()), stdout, os.Stderr
			if err := cmd.Run(); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Str("callout", o.callout).Msg("callout failed")
			}
		}
		return true
	}
	src, err := o.newSource(log, "kproxy watch")
	if err != nil {
		return err
	}
	defer src.Stop()
	// The same coalescing and flush scheduler as the Watcher actor: events
	// mark services dirty, and a flush rebuilds only those. Every flush
	// emits the whole state (a callout reads all of it), as a full sync
	// would, so every change takes the paced lane: at once after a quiet
	// period, at most one flush per --min-sync-period after a burst. A
	// core's deltas are paced by the core already.
	period := o.minSyncPeriod
	if o.isRemote() {
		period = 0
	}
	pacing := watcher.NewFlushes(period, nil)
	var mu sync.Mutex
	tracker := watcher.NewTracker(src)
	wake := make(chan struct{}, 1)
	if err := src.Start(ctx, func(e watcher.Event) {
		mu.Lock()
		tracker.Handle(e)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before the source was complete
		}
		return err
	}
	mu.Lock()
	tracker.Mark("") // the source is complete: build everything once
	mu.Unlock()
	for first := true; ; first = false {
		mu.Lock()
		ch := tracker.Flush()
		state := tracker.State()
		mu.Unlock()
		for _, err := range ch.Errors {
			log.Warn().Err(err).Msg("service rejected")
		}
		if !emit(state) && !first {
			pacing.Unused(watcher.Paced) // nothing changed: the next change must not wait for it
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		if _, after := pacing.Request(watcher.Paced, time.Now()); after > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(after):
			}
		}
		pacing.Flushing(watcher.Paced, time.Now())
	}
}

// coreHandler serves a core's /metrics and /healthz (coreHealth).
func coreHandler(h *coreHealth) http.Handler {
	m := metrics.New()
	m.ClientGo()
	f := func(counter func(*remote.CoreCounters) *atomic.Int64) func() float64 {
		return func() float64 {
			if core := h.core.Load(); core != nil {
				return float64(counter(core.Counters()).Load())
			}
			return 0
		}
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Subsystem: "kproxy", Name: "core_subscriptions", Help: "Backends subscribed now."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Subscriptions })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Subsystem: "kproxy", Name: "core_subscriptions_queued", Help: "Subscriptions waiting for a snapshot slot (--serve-max-snapshots-in-flight)."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Queued })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "core_snapshots_total", Help: "Full snapshots sent (subscriptions and resyncs)."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Snapshots })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "core_deltas_total", Help: "Deltas sent."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Deltas })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "core_resyncs_total", Help: "Slow backends sent what they missed in one delta instead of their backlog."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Resyncs })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "core_subscriptions_dropped_total", Help: "Subscriptions dropped after their lease (a backend gone)."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Dropped })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "core_subscriptions_refused_total", Help: "Subscriptions refused (a node its certificate does not name)."}, f(func(c *remote.CoreCounters) *atomic.Int64 { return &c.Refused })),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if why := h.unhealthy(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

// coreHealth is a core's health: unhealthy until its source has synced
// (the core serves nothing before), and while the API server has not
// answered for longer than limit (the views it serves may be stale).
type coreHealth struct {
	views watcher.NodeViews
	limit time.Duration
	core  atomic.Pointer[remote.Core]
}

// unhealthy says why the core is unhealthy, or "".
func (h *coreHealth) unhealthy() string {
	if h.core.Load() == nil {
		return "the source has not synced: no view is served yet"
	}
	if api, ok := h.views.(interface{ APIDownFor() time.Duration }); ok {
		if d := api.APIDownFor(); d > h.limit {
			return fmt.Sprintf("the API server has not answered for %v (limit %v): the views served may be stale", d.Round(time.Second), h.limit)
		}
	}
	return ""
}
