package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/actors/metrics"
	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/cmd/kproxy/liveview"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// runOptions are kproxy run's flags; names follow kube-proxy where it has one.
type runOptions struct {
	sourceFlags
	conntrack     conntrackFlags
	config        string
	writeConfigTo string
	portalMode    string
	nodePortAddrs string
	// clusterCIDR and serviceCIDRs: kube-proxy's --cluster-cidr and the API
	// server's --service-cluster-ip-range, comma-separated, one per family.
	clusterCIDR  string
	serviceCIDRs string
	// preservePodSourceIP dials from the address of a client that is a
	// pod of this node (datapath.PodClients).
	preservePodSourceIP bool
	// detectLocalMode tells pods' traffic apart, as kube-proxy's:
	// ClusterCIDR (--cluster-cidr) or NodeCIDR (this node's podCIDRs).
	detectLocalMode string
	netshInterface  string
	bindAddress     string
	portRange       string
	udpIdleTimeout  time.Duration
	outliers        balancer.OutlierConfig
	limits          limitFlags
	logLevel        string
	logFormat       string

	// Operator endpoints, as kube-proxy's: empty turns one off.
	healthzBindAddress string
	metricsBindAddress string
	metricsPortsLimit  int
	metricsActors      bool
	profiling          bool
	syncPeriod         time.Duration

	// Hand-over to the next process.
	shutdownGrace   time.Duration
	proxyPortsFile  string
	readyFile       string
	socketKeeper    string
	keepConnections bool
	podName         string // this process's pod, to tell its deletion from a restart in place
	podNamespace    string
	tracing         tracingFlags

	enableFaultInjection  bool
	adminAddress          string
	adminTokenFile        string
	adminAllowNonLoopback bool

	// The live view (--ui-address); empty: off.
	uiAddress          string
	uiAllowNonLoopback bool

	// profilingAddress serves Go's profiler (/debug/pprof/); empty: off.
	profilingAddress string
}

func runFlags(o *runOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("kproxy run", flag.ContinueOnError)
	o.sourceFlags.register(fs)
	o.conntrack.register(fs)
	fs.StringVar(&o.config, "config", "", "a config file: kube-proxy's KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) and/or a KproxyConfiguration (kproxy.io/v1alpha1); flags given on the command line win")
	fs.StringVar(&o.writeConfigTo, "write-config-to", "", `write the effective config (the file's settings and the flags) to this file ("-": standard output) and exit`)
	fs.StringVar(&o.portalMode, "portal", portalAuto, "how traffic reaches the listeners: nftables or iptables (kernel rules redirect service addresses to proxy ports), netsh (Windows: service IPs added to an interface), bind (listen on each service IP:port, no rules), or auto (the first kernel portal that works: nftables, then iptables; netsh on Windows; the start fails when none does)")
	fs.StringVar(&o.nodePortAddrs, "nodeport-addresses", "", "comma-separated CIDRs: node ports answer only on local addresses within them (default: all local addresses)")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "comma-separated CIDRs of the pods, one per family, as kube-proxy's: their traffic to an external IP, load-balancer IP or node port of an externalTrafficPolicy Local service uses every endpoint, as the node's own traffic does (empty: only the node's)")
	fs.BoolVar(&o.preservePodSourceIP, "preserve-pod-source-ip", true, "dial every endpoint of a client that is a pod of this node (within --cluster-cidr, or this node's pod CIDRs with --detect-local-mode NodeCIDR) from the pod's own address, as kube-proxy's DNAT keeps it: endpoints, and their network policies, see the pod (kernel portal modes; the client pod itself and an endpoint on the client's own bridge see the node's address)")
	fs.StringVar(&o.detectLocalMode, "detect-local-mode", detectLocalClusterCIDR, `how pods' traffic is told apart, as kube-proxy's: "ClusterCIDR" (a source within --cluster-cidr) or "NodeCIDR" (a source within this node's spec.podCIDRs, read from its Node object at start: only this node's pods; --source kube)`)
	fs.StringVar(&o.serviceCIDRs, "service-cluster-ip-range", "", "comma-separated service CIDRs, one per family, as the API server's flag: traffic to an address within them that no service holds is dropped rather than routed out")
	fs.StringVar(&o.netshInterface, "netsh-interface", "", "Windows interface the netsh portal adds service IPs to (default $INTERFACE_TO_ADD_SERVICE_IP, else \"vEthernet (HNS Internal NIC)\", as winuserspace)")
	fs.StringVar(&o.bindAddress, "bind-address", "0.0.0.0", "address for proxy-port listeners and node ports")
	fs.StringVar(&o.portRange, "port-range", "", `proxy port range "begin-end" or "begin+offset" (empty: any free port)`)
	fs.DurationVar(&o.udpIdleTimeout, "udp-idle-timeout", datapath.DefaultUDPIdleTimeout, "how long an idle UDP flow is kept")
	fs.IntVar(&o.outliers.ConsecutiveFailures, "outlier-consecutive-failures", balancer.DefaultOutlierConfig.ConsecutiveFailures, "failed dials in a row (refused, unreachable; timed out once the endpoint answered no dial for 3 s) that eject an endpoint for a while; 0 turns outlier detection off")
	fs.DurationVar(&o.outliers.BaseEjection, "outlier-base-ejection-time", balancer.DefaultOutlierConfig.BaseEjection, "how long an endpoint's first ejection lasts; each further one without a successful dial between doubles it")
	fs.DurationVar(&o.outliers.MaxEjection, "outlier-max-ejection-time", balancer.DefaultOutlierConfig.MaxEjection, "the longest an ejection lasts")
	o.limits.register(fs)
	fs.StringVar(&o.healthzBindAddress, "healthz-bind-address", "0.0.0.0:10256", "host:port of the health server (/healthz, /livez), as kube-proxy's; empty turns it off")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", "127.0.0.1:10249", "host:port of the Prometheus metrics server (/metrics), as kube-proxy's; empty turns it off")
	fs.IntVar(&o.metricsPortsLimit, "metrics-service-ports-limit", 1000, "per service port metrics for at most this many service ports (bounded series); 0 turns them off")
	fs.BoolVar(&o.metricsActors, "metrics-actors", false, "also export protoactor's own actor metrics (mailbox length, receive duration, spawns, restarts, dead letters); they cost a little on every actor message")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on --metrics-bind-address, as kube-proxy's enableProfiling")
	fs.DurationVar(&o.syncPeriod, "sync-period", defaultSyncPeriod, "kube-proxy's sync period: /healthz turns unhealthy when queued changes are not applied within twice this")
	fs.StringVar(&o.readyFile, "ready-file", "", "a file kept present while this process serves (every service port of the first state listening, its rules programmed, not draining), for a readiness probe that must ask this process: kproxy check-ready; empty turns it off")
	fs.StringVar(&o.socketKeeper, "socket-keeper", "", "the unix socket of a kproxy keep-sockets beside this process: it holds the listening sockets while no kproxy runs (killed, restarting), and the next process takes them back; empty turns it off")
	fs.BoolVar(&o.keepConnections, "socket-keeper-connections", true, "with --socket-keeper, the keeper holds every TCP connection (its sockets and the pipes its bytes cross) and UDP flow too, so a killed kproxy breaks none and loses no answer on its way; false: only the listening sockets (a connection or flow then costs no message to the keeper)")
	fs.StringVar(&o.podName, "pod-name", defaultPodName(), "this process's pod (default $POD_NAME): on SIGTERM with --socket-keeper and no successor, --source kube asks the API server whether the pod is being deleted (then the connections drain for --shutdown-grace-period) or only its container restarts (then they are left to the keeper for the next process); empty: always the latter")
	fs.StringVar(&o.podNamespace, "pod-namespace", defaultPodNamespace(), "the namespace of --pod-name (default $POD_NAMESPACE, else kube-system)")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace-period", defaultShutdownGrace, "after SIGTERM, how long established connections may go on once the listeners are closed (new connections go to the next kproxy, whose sockets share the ports); a second signal ends it at once")
	fs.StringVar(&o.proxyPortsFile, "proxy-ports-file", defaultProxyPortsFile, "where kproxy records its proxy ports, so the next process (an upgrade, a restart, after kill -9) takes the same ones and the kernel rules left in place stay right; empty turns it off")
	o.tracing.register(fs)
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "json or console")
	fs.BoolVar(&o.enableFaultInjection, "enable-fault-injection", false, "serve the fault-injection admin API (crash actors, chaos, endpoint faults, state) on --admin-address")
	fs.StringVar(&o.adminAddress, "admin-address", DefaultAdminAddress, "address of the admin API; must be loopback unless --admin-allow-non-loopback")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "where to write the admin API's token, which every request needs (default: a file per admin address in $XDG_RUNTIME_DIR/kproxy, where kproxy chaos finds it)")
	fs.BoolVar(&o.adminAllowNonLoopback, "admin-allow-non-loopback", false, "allow a non-loopback --admin-address")
	fs.StringVar(&o.uiAddress, "ui-address", liveview.DefaultAddress, "host:port of the live view: a read-only web page of the actor tree, the service ports and a stream of restarts and changes (with --enable-fault-injection, crash and storm buttons); must be loopback unless --ui-allow-non-loopback; empty turns it off")
	fs.BoolVar(&o.uiAllowNonLoopback, "ui-allow-non-loopback", false, "allow a non-loopback --ui-address (the page shows every service port and endpoint to whoever reaches it; its fault buttons still answer only this host)")
	fs.StringVar(&o.profilingAddress, "profiling-address", "", "loopback host:port serving Go's profiler (/debug/pprof/: CPU, heap, allocations, goroutines, mutex and block profiles); empty (the default) turns it off")
	return fs
}

func (o *runOptions) validate() error {
	if err := o.sourceFlags.validate(); err != nil {
		return err
	}
	if err := o.conntrack.validate(); err != nil {
		return err
	}
	switch o.portalMode {
	case portalAuto, datapath.ModeBind, datapath.ModeNftables, datapath.ModeIPTables, datapath.ModeNetsh:
	default:
		return fmt.Errorf("--portal %q: want auto, nftables, iptables, netsh or bind", o.portalMode)
	}
	if _, err := parsePrefixes("nodeport-addresses", o.nodePortAddrs); err != nil {
		return err
	}
	if _, err := parseFamilyPrefixes("cluster-cidr", o.clusterCIDR); err != nil {
		return err
	}
	switch o.detectLocalMode {
	case "", detectLocalClusterCIDR: // empty: kube-proxy's default
	case detectLocalNodeCIDR:
		if !o.isKube() {
			return fmt.Errorf("--detect-local-mode %s: this node's pod CIDRs come from its Node object, which only --source kube reads", o.detectLocalMode)
		}
	default:
		return fmt.Errorf("--detect-local-mode %q: want %s or %s", o.detectLocalMode, detectLocalClusterCIDR, detectLocalNodeCIDR)
	}
	if _, err := parseFamilyPrefixes("service-cluster-ip-range", o.serviceCIDRs); err != nil {
		return err
	}
	if net.ParseIP(o.bindAddress) == nil {
		return fmt.Errorf("--bind-address %q: not an IP address", o.bindAddress)
	}
	if o.udpIdleTimeout <= 0 {
		return fmt.Errorf("--udp-idle-timeout %v: must be positive", o.udpIdleTimeout)
	}
	if o.healthzBindAddress != "" {
		if _, _, err := net.SplitHostPort(o.healthzBindAddress); err != nil {
			return fmt.Errorf("--healthz-bind-address %q: %w", o.healthzBindAddress, err)
		}
		if o.syncPeriod <= 0 {
			return fmt.Errorf("--sync-period %v: must be positive", o.syncPeriod)
		}
	}
	if o.metricsBindAddress != "" {
		if _, _, err := net.SplitHostPort(o.metricsBindAddress); err != nil {
			return fmt.Errorf("--metrics-bind-address %q: %w", o.metricsBindAddress, err)
		}
	}
	if o.profiling && o.metricsBindAddress == "" {
		return errors.New("--profiling: profiles are served on --metrics-bind-address, which is empty")
	}
	if o.outliers.ConsecutiveFailures < 0 {
		return fmt.Errorf("--outlier-consecutive-failures %d: must not be negative", o.outliers.ConsecutiveFailures)
	}
	if o.outliers.ConsecutiveFailures > 0 && (o.outliers.BaseEjection <= 0 || o.outliers.MaxEjection < o.outliers.BaseEjection) {
		return fmt.Errorf("--outlier-base-ejection-time %v, --outlier-max-ejection-time %v: want 0 < base <= max", o.outliers.BaseEjection, o.outliers.MaxEjection)
	}
	if o.shutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace-period %v: must not be negative", o.shutdownGrace)
	}
	if err := o.tracing.validate(); err != nil {
		return err
	}
	if o.profilingAddress != "" {
		if err := checkProfilingAddress(o.profilingAddress); err != nil {
			return err
		}
	}
	if o.uiAddress != "" {
		if err := checkUIAddress(o.uiAddress, o.uiAllowNonLoopback); err != nil {
			return err
		}
	}
	if o.enableFaultInjection {
		return checkAdminAddress(o.adminAddress, o.adminAllowNonLoopback)
	}
	return nil
}

func runCommand(args []string) error {
	var o runOptions
	fs := runFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var ignored []string
	if o.config != "" {
		values, ign, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		if err := applyConfig(fs, values); err != nil {
			return err
		}
		ignored = ign
	}
	if o.writeConfigTo != "" {
		return writeConfigFile(o.writeConfigTo, fs)
	}
	o.preserveSourceIPGiven = given(fs, "preserve-source-ip-for-local-traffic-policy")
	if err := o.validate(); err != nil {
		return err
	}
	ports, err := datapath.ParsePortRange(o.portRange)
	if err != nil {
		return fmt.Errorf("--port-range: %w", err)
	}
	log, err := newLogger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	if len(ignored) > 0 {
		log.Info().Strs("fields", ignored).Str("config", o.config).Msg("KubeProxyConfiguration fields that mean nothing to a userspace proxy are ignored")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, o, ports, log, nil)
}

// writeConfigFile writes the effective config to path (whole or not at
// all), or to standard output for "-".
func writeConfigFile(path string, fs *flag.FlagSet) error {
	var b bytes.Buffer
	if err := writeConfig(&b, fs); err != nil {
		return err
	}
	if path == "-" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	return nil
}

// run serves until ctx is done, then stops cleanly. started, if set, sees
// the proxy before the source's first snapshot (tests subscribe there).
func run(ctx context.Context, o runOptions, ports datapath.PortRange, log zerolog.Logger, started func(*actors.Proxy)) error {
	restoreGC := relaxGCForStart()
	defer restoreGC()
	rules, mode, pods, err := portalRules(ctx, o, ports, log)
	if err != nil {
		return err
	}
	o.portalMode = mode
	o.sourceFlags.resolvePreserveSourceIP(mode)
	log.Info().Str("version", version).Str("source", o.source).Str("portal", o.portalMode).
		Str("bindAddress", o.bindAddress).Str("nodeName", o.nodeName).Msg("starting kproxy")
	nofile := raiseFDLimit(log)
	cfg := actors.Config{
		PortalMode:     o.portalMode,
		BindAddress:    o.bindAddress,
		Ports:          datapath.NewPortAllocator(o.bindAddress, ports),
		UDPIdleTimeout: o.udpIdleTimeout,
		Outliers:       o.outliers,
		Limits:         o.limits.limits(nofile),
		FDLimit:        nofile,
		TCPKeepAlive:   o.limits.tcpKeepAlive,
		Reaper:         o.limits.reaper(),
		TCPEventLoops:  o.limits.tcpEventLoops,
		MinSyncPeriod:  o.minSyncPeriod,
		SourcePaced:    o.isRemote(), // a core paces its deltas with its own --min-sync-period
		Rules:          rules,
		Conntrack:      newFlows(o.portalMode),
		Log:            log,
	}
	cfg.PodClients = podClients(o, pods, log)
	captureBridges(ctx, cfg.PodClients, log)
	datapath.SetMaxPipes(cfg.Limits.MaxPipes())
	tracer, stopTracing, err := o.tracing.start(ctx, o.nodeName, log)
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	cfg.Tracer = tracer
	stages := []string{healthcheck.StageServicePorts}
	if rules != nil {
		stages = append(stages, healthcheck.StageRules)
	}
	cfg.Ready = healthcheck.NewReadiness(stages...)
	if o.readyFile != "" {
		if err := watchReadyFile(o.readyFile, cfg.Ready, log); err != nil {
			return err
		}
	}
	sockets, succ := o.socketSources(ctx, &cfg, log)
	if sockets != nil {
		defer sockets.Close()
	}
	if datapath.UsesProxyPorts(o.portalMode) {
		cfg.RecoveredPorts = loadProxyPorts(o.proxyPortsFile, o.nodeName, log)
	}
	enableMigrateReq(log)
	if datapath.Transparent(o.portalMode) {
		// The kernel modes' traffic is conntrack's (DNAT to proxy ports);
		// the bind and netsh modes leave the node's tracking alone.
		o.conntrack.apply(log)
	}
	src, err := o.newSource(log, "kproxy run")
	if err != nil {
		return err
	}
	cfg.View = src
	// The operator endpoints stop when run returns, and it waits for
	// them to finish their requests (deferred calls run last first).
	opCtx, opCancel := context.WithCancel(ctx)
	var opStopped []<-chan struct{}
	defer func() {
		for _, c := range opStopped {
			<-c
		}
	}()
	defer opCancel()
	opStopped, err = o.operatorEndpoints(opCtx, &cfg, src, log)
	if err != nil {
		return err
	}
	if rs, ok := src.(*remote.Source); ok && cfg.Metrics != nil {
		rs.OnDelivered(cfg.Metrics.Remote(rs))
	}
	defer cfg.ServiceHealth.Close()
	releaseAfterFloods(ctx, cfg.Limits, log)
	cfg.FirstStateReported = func(n int) { releaseAfterStart(n, restoreGC, log) }
	var inject faults.Config
	if o.enableFaultInjection {
		inject = faults.Prepare(&cfg)
	}
	proxy := actors.Start(cfg)
	if sockets != nil {
		sockets.OnReconnect(proxy.Listeners.KeepAll) // a keeper restarted lost them
	}
	succ.watch(cfg.Ready, proxy.Listeners)
	if datapath.UsesProxyPorts(o.portalMode) {
		startProxyPortsWriter(ctx, o.proxyPortsFile, o.nodeName, proxy, log)
	}
	var injector *faults.Injector
	if o.enableFaultInjection {
		injector = faults.New(proxy, inject)
		if err := startAdmin(ctx, o.adminAddress, o.tokenFile(), proxy, injector, o.apiConns, log); err != nil {
			proxy.Stop(context.Background())
			return err
		}
	}
	if o.uiAddress != "" {
		ui, err := liveview.New(opCtx, liveview.Options{Address: o.uiAddress, Proxy: proxy, Injector: injector})
		if err != nil {
			proxy.Stop(context.Background())
			return err
		}
		// As the other operator endpoints: a shared port (the next kproxy
		// of a hand-over binds it too), retried while it cannot be bound,
		// never a reason not to proxy.
		opStopped = append(opStopped, serveHTTP(opCtx, "the live view", o.uiAddress, ui, log))
	}
	if started != nil {
		started(proxy)
	}
	done := make(chan struct{})
	srcCtx, srcCancel := context.WithCancel(ctx)
	defer srcCancel()
	var srcErr error
	go func() {
		defer close(done)
		srcErr = runSource(srcCtx, src, proxy, log)
	}()
	select {
	case <-ctx.Done():
	case <-done:
	}
	srcCancel()
	<-done
	log.Info().Msg("shutting down")
	grace := o.shutdownGrace
	if sockets != nil && !succ.successorServing() {
		if o.podEnding(log) {
			log.Info().Dur("grace", grace).Msg("no successor serves and the pod is being deleted: draining the connections")
		} else {
			// A restart in place: the keeper holds the sockets and the
			// connections, and queues what comes until the next process
			// takes them; this one must exit for the kubelet to start it.
			sockets.Detach()
			grace = min(grace, restartGrace)
			log.Info().Dur("grace", grace).Msg("no successor serves: the socket keeper keeps the listening sockets and the connections for the next process")
		}
	}
	cfg.Ready.Drain()
	// The health-check node ports stop accepting with the service ports
	// (the next kproxy's sockets share them), and finish what they have.
	hcDone := make(chan struct{})
	go func() {
		defer close(hcDone)
		hctx, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
		defer cancel()
		cfg.ServiceHealth.Shutdown(hctx)
	}()
	defer func() { <-hcDone }()
	// A second SIGINT or SIGTERM cuts the grace period short.
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	stopCtx, cancel := context.WithTimeout(context.Background(), o.shutdownGrace+10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-again:
			log.Warn().Msg("second signal: closing everything now")
			cancel()
		case <-stopCtx.Done():
		}
	}()
	if err := proxy.StopWith(stopCtx, actors.StopOptions{KeepRules: true, Grace: grace}); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info().Msg("stopped")
	return srcErr
}

// operatorEndpoints sets up what kube-proxy offers operators: the health
// and metrics servers (each unless its address is empty) and the
// health-check node ports.
func (o runOptions) operatorEndpoints(ctx context.Context, cfg *actors.Config, src source, log zerolog.Logger) (stopped []<-chan struct{}, err error) {
	var eligible func() bool
	if n, ok := src.(interface{ NodeEligible() bool }); ok {
		eligible = n.NodeEligible
	}
	syncPeriod := o.syncPeriod
	if syncPeriod <= 0 {
		syncPeriod = defaultSyncPeriod
	}
	cfg.Health = healthcheck.NewProxyHealth(2*syncPeriod, eligible)
	cfg.Health.Readiness = cfg.Ready
	if o.metricsBindAddress != "" {
		m := metrics.New()
		m.ClientGo()
		cfg.Metrics = m
		if o.metricsActors {
			mp, err := m.MeterProvider()
			if err != nil {
				return stopped, err
			}
			cfg.MeterProvider = mp
		}
		cfg.Stats = datapath.NewStatsTable()
		if o.metricsPortsLimit > 0 {
			m.ServicePorts(cfg.Stats, o.metricsPortsLimit)
		}
		m.Limits(cfg.Limits)
		m.Reaper(cfg.Reaper)
		if u, ok := cfg.Rules.(metrics.UnredirectedCounter); ok {
			m.Unredirected(u)
		}
		cfg.Health.Observe = m.Health
		handler := metricsMux(m.Handler(), o.portalMode, o.profiling)
		stopped = append(stopped, serveHTTP(ctx, "metrics (/metrics)", o.metricsBindAddress, handler, log))
	}
	if o.healthzBindAddress != "" {
		stopped = append(stopped, serveHTTP(ctx, "health checks (/healthz, /livez)", o.healthzBindAddress, cfg.Health.Handler(), log))
	}
	if o.profilingAddress != "" {
		stopped = append(stopped, serveHTTP(ctx, "the profiler (/debug/pprof/)", o.profilingAddress, profilingHandler(), log))
	}
	prefixes, _ := parsePrefixes("nodeport-addresses", o.nodePortAddrs) // validated
	hosts, err := nodeAddresses(prefixes)
	if err != nil {
		return stopped, fmt.Errorf("health-check node ports: %w", err)
	}
	cfg.ServiceHealth = healthcheck.NewServices(hosts, cfg.Health, log)
	return stopped, nil
}

// defaultShutdownGrace fits in a pod's default 30 s termination grace.
const defaultShutdownGrace = 20 * time.Second

// podEnding reports whether this process's pod is being deleted (see
// podending.go); false when it cannot tell.
func (o runOptions) podEnding(log zerolog.Logger) bool {
	if o.podName == "" || !o.sourceFlags.isKube() {
		return false
	}
	client, err := o.sourceFlags.kubeClient()
	if err == nil {
		var ending bool
		if ending, err = podEnding(context.Background(), client, o.podNamespace, o.podName); err == nil {
			return ending
		}
	}
	log.Warn().Err(err).Msg("cannot tell whether the pod is being deleted: taking SIGTERM for a restart in place")
	return false
}

// restartGrace is the drain of a process stopping with no successor but a
// socket keeper (its container restarted): the requests in its hands may
// finish, while new ones queue on the kept sockets for the next process.
const restartGrace = time.Second

// defaultSyncPeriod is kube-proxy's default sync period.
const defaultSyncPeriod = 30 * time.Second

const portalAuto = "auto"

// portalRules sets up the kernel portal of the chosen mode; auto is the
// first kernel portal that works here (autoPortal). pods are the pods'
// prefixes the rules tell local traffic by (--cluster-cidr, or the Node's
// pod CIDRs).
func portalRules(ctx context.Context, o runOptions, ports datapath.PortRange, log zerolog.Logger) (r rules.Interface, mode string, pods []netip.Prefix, err error) {
	prefixes, _ := parsePrefixes("nodeport-addresses", o.nodePortAddrs)                // validated
	clusterCIDRs, _ := parseFamilyPrefixes("cluster-cidr", o.clusterCIDR)              // validated
	serviceCIDRs, _ := parseFamilyPrefixes("service-cluster-ip-range", o.serviceCIDRs) // validated
	ro := rules.Options{NodePortAddresses: prefixes, ClusterCIDRs: clusterCIDRs, ServiceCIDRs: serviceCIDRs, Interface: o.netshInterface}
	if o.detectLocalMode == detectLocalNodeCIDR {
		cidrs, err := o.nodePodCIDRs(ctx, log)
		if err != nil {
			return nil, "", nil, err
		}
		ro.ClusterCIDRs = cidrs
	}
	ro.NodeIPs = nodeIPs(o.bindAddress, prefixes, log)
	ro.ProxyPortFirst, ro.ProxyPortLast = proxyPortSpan(ports)
	mode = o.portalMode
	if mode == portalAuto {
		r, mode, err = autoPortal(ctx, ro, log)
		return r, mode, ro.ClusterCIDRs, err
	}
	if r, err = newRules(ctx, mode, ro); err != nil {
		return nil, "", nil, fmt.Errorf("--portal %w", portalUnavailable(mode, err))
	}
	return r, mode, ro.ClusterCIDRs, nil
}

func parsePrefixes(flag, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flag, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseFamilyPrefixes reads a dual-stack CIDR flag (kube-proxy's
// --cluster-cidr, the API server's --service-cluster-ip-range): at most
// one CIDR per family.
func parseFamilyPrefixes(flag, s string) ([]netip.Prefix, error) {
	ps, err := parsePrefixes(flag, s)
	if err != nil {
		return nil, err
	}
	if len(ps) > 2 || len(ps) == 2 && ps[0].Addr().Is4() == ps[1].Addr().Is4() {
		return nil, fmt.Errorf("--%s %q: want one CIDR, or two of different families", flag, s)
	}
	return ps, nil
}

// runSource runs the source until ctx ends; its notifications only hand
// events to the Watcher actor, which programs nothing before the source
// is complete. A source that fails to start (a core refusing this
// backend) ends kproxy with its error.
func runSource(ctx context.Context, src source, proxy *actors.Proxy, log zerolog.Logger) error {
	defer src.Stop()
	log.Info().Msg("waiting for the source to sync")
	if err := src.Start(ctx, proxy.SourceEvent); err != nil {
		if ctx.Err() == nil {
			log.Error().Err(err).Msg("source failed")
			return fmt.Errorf("source: %w", err)
		}
		return nil
	}
	log.Info().Msg("source synced")
	proxy.SourceSynced()
	<-ctx.Done()
	return nil
}

// tokenFile is --admin-token-file or its default for --admin-address.
func (o runOptions) tokenFile() string {
	if o.adminTokenFile != "" {
		return o.adminTokenFile
	}
	return defaultAdminTokenFile(o.adminAddress)
}
