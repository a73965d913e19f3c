package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/kproxy/kproxy/bench/harness"
)

const benchUsage = `kproxy-bench: benchmark kproxy on many service ports, churn and chaos,
against direct connections, HAProxy and an earlier kproxy build in the same run

  kproxy-bench [FLAGS] SCENARIO[,SCENARIO...]|all [FLAGS]

Scenarios:
  startup  time until N service ports listen and forward; RSS, fds, goroutines per port
  ports    N ports x M endpoints, C clients, modes keepalive, conn, close, udp, bulk:
           requests/s (bulk: Gbit/s), latency percentiles, CPU per request (bulk:
           per GiB) of each proxy process from /proc, in interleaved rounds
  churn    endpoint changes at R/s across S services through the file source (or
           a core kproxy follows over remoting: --churn-via remote), with
           traffic flowing: change-to-applied latency, failed requests
  chaos    a crash storm through the admin API during load: failures on crashed and
           untouched ports
  client-address
           the client's address handed to the endpoint: plain, transparent
           (kproxy.io/preserve-source-ip), PROXY v1 and v2 (kproxy.io/proxy-protocol),
           through the nftables portal in network namespaces it creates (root):
           connections/s and keep-alive requests/s (modes conn, keepalive), kproxy's
           CPU per connection and request and its ratio to plain, in interleaved rounds
  hollow   a core in this process serving N hollow nodes (--hollow-nodes), as kubemark's
           hollow nodes serve kube-proxy: real backend sources, 100 per child process
           (kproxy-bench hollow-host), endpoint changes at --churn-rate across
           --services for --duration (hollow defaults: 10000 services, 100/s, 60s);
           change-to-store p50/p99/max over every node, lost changes, the core's CPU
           per change, the nodes' CPU per node and change, deltas per node per change, RSS and heap, as a markdown table
           row per N. It runs alone and needs no kproxy binary

The kproxy under test runs as its own process (the --kproxy binary, by
default the kproxy next to this one) with the bind portal on loopback:
backends on 127.1.0.0/16, kproxy's services on 127.2.0.0/16, HAProxy's on
127.3.0.0/16, the baseline kproxy's (--baseline-kproxy) on 127.5.0.0/16.

Flags:
`

func benchCommand(args []string, stdout io.Writer) error {
	command := strings.Join(append([]string{"kproxy-bench"}, args...), " ")
	fs := flag.NewFlagSet("kproxy-bench", flag.ContinueOnError)
	var o harness.Options
	fs.IntVar(&o.Ports, "ports", 100, "N: service ports")
	fs.IntVar(&o.Endpoints, "endpoints", 2, "M: endpoints (backends) per service port")
	fs.IntVar(&o.Clients, "clients", 16, "C: concurrent clients, spread over all ports")
	sweep := fs.String("sweep-clients", "", "ports: also run each TCP mode at each of these concurrencies, comma-separated (e.g. 16,256,2000)")
	modes := fs.String("modes", "keepalive,conn,close,udp,bulk", "ports: load modes (keepalive: requests over a connection; conn: a connection per request; close: a connection per HTTP/1.1 request with Connection: close to nginx (Go's net/http where nginx is not installed), the server closing first; udp: a datagram and its echo; bulk: streams to a sink, 1 MiB a request)")
	fs.IntVar(&o.Rounds, "rounds", 3, "interleaved rounds per target (medians are reported); startup: starts per proxy")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "one round of load; the churn and the storm last as long (hollow's churn: 60s unless set)")
	fs.IntVar(&o.Size, "size", 64, "bytes per request (echoed)")
	fs.BoolVar(&o.UDPGSO, "udp-gso", false, "udp: a client sends each burst in UDP_SEGMENT sends (one system call for up to 64 datagrams, as QUIC stacks send) rather than a datagram per call (Linux)")
	fs.IntVar(&o.UDPBurst, "udp-burst", 1, "udp: datagrams a client sends to a port before it reads their echoes (1: one at a time); each echo is a request")
	fs.IntVar(&o.PerConn, "requests-per-conn", 100, "keepalive and bulk: requests per connection before the client moves to its next port")
	fs.Int64Var(&o.MaxRequests, "max-requests", 10_000_000, "one round ends after this many requests if its duration has not passed")
	compare := fs.String("compare", "", "also measure: direct (clients to the backends), kernel (root: nftables DNAT to the backends, no process), haproxy (tcp mode, 2 threads, the same frontends), haproxy-tuned (the same with splice-auto, tcp-smart-accept and tcp-smart-connect, as HAProxy's manual tunes a TCP forwarder), nginx (udp: nginx's stream proxy, a worker per CPU), relay (udp: a bare Go UDP relay, its own process), baseline (the --baseline-kproxy binary), comma-separated")
	fs.IntVar(&o.Services, "services", 0, "churn and hollow: S services (default: churn --ports, hollow 10000)")
	fs.Float64Var(&o.ChurnRate, "churn-rate", 20, "churn and hollow: endpoint changes per second (hollow: 100 unless set)")
	fs.StringVar(&o.ChurnVia, "churn-via", harness.ChurnFile, "churn: how the changes reach kproxy: file (manifests its file source reads) or remote (a core in the harness's process, fed each change directly; kproxy run --source remote: follows it)")
	fs.Float64Var(&o.LoadRate, "load-rate", 1000, "churn and chaos: requests per second of the background load (0: as fast as it goes)")
	fs.Float64Var(&o.ChaosRate, "chaos-rate", 20, "chaos: crashes per second (at most 100)")
	kinds := fs.String("chaos-kinds", "portal", "chaos: actor kinds to crash: portal, balancer, affinity, serviceport, watcher, proxier")
	fs.Uint64Var(&o.Seed, "seed", 1, "chaos: seed for the storm's choices")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 2*time.Minute, "how long all ports may take to forward")
	fs.DurationVar(&o.IdleWait, "idle-wait", 0, "startup: also measure RSS and goroutines once the ports have had no traffic for this long, e.g. 10s (0: not measured)")
	fs.StringVar(&o.Kproxy, "kproxy", "", "the kproxy binary under test (default: kproxy next to this binary)")
	fs.StringVar(&o.Baseline, "baseline-kproxy", "", "startup and ports: also measure this kproxy binary (e.g. a build of main) in the same interleaved rounds, on its own addresses with the same --kproxy-arg flags; the table gains kproxy/baseline ratios (implies --compare baseline)")
	fs.StringVar(&o.HAProxy, "haproxy", "", "the haproxy binary (default: haproxy on PATH)")
	var kproxyArgs multiFlag
	fs.Var(&kproxyArgs, "kproxy-arg", "one more `kproxy run` argument (repeatable), e.g. --kproxy-arg=--metrics-service-ports-limit=0")
	fs.DurationVar(&o.CoreMinSyncPeriod, "core-min-sync-period", 0, "churn --churn-via remote: the core's --min-sync-period (0: its default)")
	fs.IntVar(&o.ChurnProbers, "churn-probers", 0, "churn: clients probing the pending changes (0: 16, and one more per 16 changes/s above 256/s, so the probes keep up with the changes)")
	jsonOut := fs.String("json", "", "write the results as JSON to this file")
	htmlOut := fs.String("html", "", "write an HTML report with charts to this file")
	workDir := fs.String("work-dir", "", "keep manifests, configs and logs here (default: a temporary directory, removed afterwards)")
	short := fs.Bool("short", false, "a short run of each scenario (make bench): 200 ports, 2 s rounds, unless set")
	quiet := fs.Bool("quiet", false, "no progress bar or step lines, only the table")
	hollow := addHollowFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, benchUsage)
		fs.PrintDefaults()
	}
	// The scenario may come first or last: kproxy-bench ports --ports 10.
	var scenarioArg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		scenarioArg, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if scenarioArg == "" && fs.NArg() > 0 {
		scenarioArg = fs.Arg(0)
	}
	if scenarioArg == "" || fs.NArg() > 1 || (fs.NArg() == 1 && fs.Arg(0) != scenarioArg) {
		fs.Usage()
		return errors.New("want one SCENARIO argument (or a comma-separated list, or all)")
	}
	scenarios := strings.Split(scenarioArg, ",")
	if scenarioArg == "all" {
		scenarios = harness.Scenarios
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if slices.Contains(scenarios, harness.ScenarioHollow) {
		if len(scenarios) > 1 {
			return errors.New("hollow runs alone: it measures a core in this process, with a table of its own")
		}
		return runHollow(hollow, o, set, *quiet, stdout)
	}
	if *short {
		shortDefaults(&o, set)
	}
	o.Modes = strings.Split(*modes, ",")
	o.ChaosKinds = strings.Split(*kinds, ",")
	o.KproxyArgs = kproxyArgs
	if *compare != "" {
		o.Compare = strings.Split(*compare, ",")
	}
	for _, c := range strings.FieldsFunc(*sweep, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(c)
		if err != nil {
			return fmt.Errorf("--sweep-clients %q: %w", c, err)
		}
		o.ClientSweep = append(o.ClientSweep, n)
	}
	if o.Baseline != "" && !slices.Contains(o.Compare, harness.TargetBaseline) {
		o.Compare = append(o.Compare, harness.TargetBaseline)
	}
	if err := benchBinaries(&o); err != nil {
		return err
	}
	if *workDir == "" {
		dir, err := os.MkdirTemp("", "kproxy-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*workDir = dir
	}
	o.WorkDir = *workDir
	if !*quiet {
		o.Log = os.Stderr
		if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			o.Progress, o.Log = stdout, stdout
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, runErr := harness.Run(ctx, o, scenarios)
	if rep == nil {
		return runErr
	}
	rep.Version = kproxyVersion(o.Kproxy)
	if slices.Contains(o.Compare, harness.TargetBaseline) {
		rep.BaselineVersion = kproxyVersion(o.Baseline)
	}
	rep.Command = command
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{*jsonOut, rep.WriteJSON}, {*htmlOut, rep.WriteHTML}} {
		if out.path == "" {
			continue
		}
		if err := writeFileWith(out.path, out.write); err != nil {
			return err
		}
	}
	return runErr
}

// shortDefaults make a run of every scenario take about two minutes.
func shortDefaults(o *harness.Options, set map[string]bool) {
	if !set["ports"] {
		o.Ports = 200
	}
	if !set["duration"] {
		o.Duration = 2 * time.Second
	}
	if !set["rounds"] {
		o.Rounds = 3
	}
}
