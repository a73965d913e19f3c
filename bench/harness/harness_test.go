package harness

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/filesource"
)

// The manifests the harness writes are what kproxy's file source reads:
// every service port, with its endpoints, and nothing refused.
func TestManifestsLoad(t *testing.T) {
	m := &manifests{dir: t.TempDir(), perFile: 3, tcpPort: 9000, udpPort: 9001, httpPort: 9002}
	for i := range 7 {
		m.services = append(m.services, service{IP: hostIP(kproxyNet, i), TCP: true, UDP: i%2 == 0, HTTP: i%3 == 0, Endpoints: []string{"127.1.0.1", "127.1.0.2"}})
	}
	if err := m.writeAll(); err != nil {
		t.Fatal(err)
	}
	if err := m.set(4, []string{"127.1.0.3"}); err != nil {
		t.Fatal(err)
	}
	res, err := filesource.LoadPath(m.dir, watcher.Options{NodeName: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 || len(res.Skipped) > 0 {
		t.Fatalf("errors %v, skipped %v", res.Errors, res.Skipped)
	}
	if got, want := len(res.ServicePorts), 7+4+3; got != want {
		t.Fatalf("%d service ports, want %d", got, want)
	}
	for _, sp := range res.ServicePorts {
		want := 2
		if sp.GetServicePort().GetKey().GetName() == serviceName(4) {
			want = 1
		}
		if len(sp.GetEndpoints()) != want {
			t.Errorf("%s: %d endpoints, want %d", sp.GetServicePort().GetKey().ID(), len(sp.GetEndpoints()), want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(m.dir, "*.yaml"))
	if len(files) != 3 {
		t.Errorf("%d files, want 3 (3 services each)", len(files))
	}
}

func TestAddressPlan(t *testing.T) {
	if got := hostIP(kproxyNet, 0); got != "127.2.0.1" {
		t.Errorf("first kproxy address %s", got)
	}
	if got := hostIP(haproxyNet, 254); got != "127.3.0.255" {
		t.Errorf("255th HAProxy address %s", got)
	}
	if got := hostIP(kproxyNet, maxPorts-1); got != "127.2.255.254" {
		t.Errorf("last address %s", got)
	}
	if i, ok := serviceIndex(serviceName(4321)); !ok || i != 4321 {
		t.Errorf("serviceIndex(serviceName(4321)) = %d, %v", i, ok)
	}
}

func TestHAProxyConfig(t *testing.T) {
	b := &Backends{IPs: []string{"127.1.0.1", "127.1.0.2"}, TCPPort: 9000, HTTPPort: 9080}
	read := func(peer haproxyPeer, modes ...string) string {
		path, err := writeHAProxyConfig(t.TempDir(), peer, 3, b, modes)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(path)
		return string(raw)
	}
	plain, tuned := read(haproxyPlain, ModeConn), read(haproxyTuned, ModeConn)
	if strings.Contains(plain, "8082") {
		t.Errorf("close frontends without the close mode:\n%s", plain)
	}
	for _, want := range []string{"nbthread 2", "mode tcp", "listen svc-00002\n  bind 127.3.0.3:8080\n  server e0 127.1.0.1:9000\n  server e1 127.1.0.2:9000\n"} {
		if !strings.Contains(plain, want) {
			t.Errorf("config lacks %q:\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "option") {
		t.Errorf("the plain HAProxy has options:\n%s", plain)
	}
	for _, want := range []string{"option splice-auto", "option tcp-smart-accept", "option tcp-smart-connect", "listen svc-00002\n  bind 127.6.0.3:8080\n"} {
		if !strings.Contains(tuned, want) {
			t.Errorf("tuned config lacks %q:\n%s", want, tuned)
		}
	}
	// close: a port of its own to the HTTP servers, in each HAProxy.
	for peer, want := range map[haproxyPeer]string{
		haproxyPlain:   "listen svc-00002-close\n  bind 127.3.0.3:8082\n  server e0 127.1.0.1:9080\n  server e1 127.1.0.2:9080\n",
		haproxyTuned:   "listen svc-00002-close\n  bind 127.6.0.3:8082\n  server e0 127.1.0.1:9080\n",
		haproxyMinimal: "frontend svc-00002-close\n  bind 127.3.0.3:8082\n  default_backend http-endpoints\n",
	} {
		cfg := read(peer, ModeConn, ModeClose)
		if !strings.Contains(cfg, want) {
			t.Errorf("%s config lacks %q:\n%s", peer.name, want, cfg)
		}
		if peer.minimal && !strings.Contains(cfg, "backend http-endpoints\n  server e0 127.1.0.1:9080\n  server e1 127.1.0.2:9080\n") {
			t.Errorf("minimal config lacks the HTTP servers' backend:\n%s", cfg)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{98755: "98,755", 139.54: "140", 0.327: "0.327", 80: "80", 12.25: "12.2", 1234567: "1,234,567", -2500: "-2,500"} {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
	if median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 2, 3}) != 2.5 || median(nil) != 0 {
		t.Error("median")
	}
}

// Every load mode moves real bytes to real backends, bounded by time and
// by count, and counts per address.
func TestLoadModesDirect(t *testing.T) {
	b, err := startBackends(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stopHTTP, err := b.startHTTP(context.Background(), "", t.TempDir()) // Go's net/http
	if err != nil {
		t.Fatal(err)
	}
	defer stopHTTP()
	for _, mode := range []string{ModeKeepAlive, ModeConn, ModeClose, ModeUDP, ModeBulk, ModeUDP + " burst"} {
		t.Run(mode, func(t *testing.T) {
			mode, burst, _ := strings.Cut(mode, " ")
			spec := loadSpec{Mode: mode, Clients: 2, Duration: 5 * time.Second, MaxOps: 300, Size: 64, PerConn: 10}
			if burst != "" {
				spec.Burst = 10 // each echo of a burst is a request
			}
			spec.Addrs = directAddrs(b, 3, mode)
			start := time.Now()
			res, err := runLoad(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != 0 || res.Ops != 300 {
				t.Fatalf("%d ok, %d failed (%v), want 300 ok", res.Ops, res.Errors, res.ErrSamples)
			}
			if time.Since(start) > 4*time.Second {
				t.Errorf("300 requests took %v: the count bound did not stop the load", time.Since(start))
			}
			for i, n := range res.OK {
				if n == 0 {
					t.Errorf("address %d got no requests", i)
				}
			}
			if res.Hist.TotalCount() != 300 {
				t.Errorf("histogram holds %d", res.Hist.TotalCount())
			}
		})
	}
	// Bounded by time: a load with no count bound ends after its duration.
	start := time.Now()
	if _, err := runLoad(context.Background(), loadSpec{Mode: ModeConn, Addrs: directAddrs(b, 2, ModeConn), Clients: 2, Duration: 200 * time.Millisecond, Size: 8, Rate: 200}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a 200 ms load took %v", d)
	}
}

func TestReadProcSelf(t *testing.T) {
	st, err := readProc(os.Getpid())
	if err != nil {
		t.Skip(err) // no /proc here
	}
	if st.RSS <= 0 || st.FDs <= 0 || st.Threads <= 0 {
		t.Errorf("implausible: %+v", st)
	}
	// The anonymous part: this test's heap is in it, the binary's pages
	// are not, so it is above nothing and below the whole.
	anon, err := readAnonRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if anon <= 0 || anon >= st.RSS {
		t.Errorf("anonymous RSS %d, RSS %d: want 0 < anonymous < RSS", anon, st.RSS)
	}
}

// A report renders as a table and as HTML with a chart per series.
func TestReportRenders(t *testing.T) {
	rep := sampleReport()
	var table, html strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"conn: requests/s", "2,000", "0.90", "0.45", "FAILED: kproxy exited"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	// latency, requests/s and CPU bars, requests/s, RSS, fds and goroutines over time
	if n := strings.Count(html.String(), "echarts.init"); n != 7 {
		t.Errorf("%d charts, want 7", n)
	}
}

// sampleReport is a ports scenario with a chart of each kind (7 in all)
// and a failed churn scenario.
func sampleReport() *Report {
	h := newHist()
	for i := range 100 {
		h.RecordValue(int64(100 + i))
	}
	return &Report{Command: "kproxy-bench ports", Scenarios: []*ScenarioResult{{
		Name:    "ports",
		Figures: []Figure{figure("conn: requests/s", "req/s", false, map[string]float64{TargetKproxy: 900, TargetHAProxy: 1000, TargetDirect: 2000})},
		Rounds:  []Round{{Mode: ModeConn, Target: TargetKproxy, OpsPerSecond: 900, CPUMicrosPerOp: 20}, {Mode: ModeConn, Target: TargetHAProxy, OpsPerSecond: 1000}},
		Latency: []LatencyCurve{curve(TargetKproxy, ModeConn, h), curve(TargetHAProxy, ModeConn, h)},
		Timeline: []Sample{{T: 0, Target: TargetKproxy, Procs: map[string]ProcPoint{"kproxy": {RSS: 1 << 20, FDs: 10}}},
			{T: 1, Target: TargetKproxy, Ops: 900, Procs: map[string]ProcPoint{"kproxy": {RSS: 2 << 20, FDs: 12, Goroutines: 30}}}},
	}, {Name: "churn", Error: "kproxy exited\nlog"}}}
}

// A listener appears in /proc/net/tcp: the startup scenario's listening time.
func TestWatchListeners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.2.250.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := watchListeners(ctx, []string{ln.Addr().String()}, time.Now(), nil)
	if err != nil {
		t.Skip(err)
	}
	if i := <-w.order; i != 0 {
		t.Fatalf("order gave %d, want 0", i)
	}
	if got := w.times(); got[0] <= 0 {
		t.Fatalf("listener not seen: %v", got)
	}
}

func TestBucketQuantile(t *testing.T) {
	bs := []bucket{{0.1, 50}, {0.5, 99}, {1, 100}, {math.Inf(1), 100}}
	if q := bucketQuantile(bs, 0.5); q != 0.1 {
		t.Errorf("p50 = %v, want 0.1", q)
	}
	if q := bucketQuantile(bs, 0.99); q != 0.5 {
		t.Errorf("p99 = %v, want 0.5", q)
	}
	if q := bucketQuantile([]bucket{{1, 0}}, 0.5); !math.IsNaN(q) {
		t.Errorf("empty: %v", q)
	}
}

// The bare UDP relay carries datagrams and their echoes both ways.
func TestRelay(t *testing.T) {
	b, err := startBackends(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg, err := writeRelayConfig(t.TempDir(), 2, b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeRelay(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addrs := serviceAddrs(relayNet, 2, ModeUDP)
	if _, err := awaitForwarding(ctx, nil, addrs, ModeUDP, time.Now(), 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	res, err := runLoad(ctx, loadSpec{Mode: ModeUDP, Addrs: addrs, Clients: 2, Duration: 5 * time.Second, MaxOps: 200, Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 200 || res.Errors != 0 {
		t.Fatalf("%d ok, %d failed %v", res.Ops, res.Errors, res.ErrSamples)
	}
}

// The startup probe over the backends themselves, no proxy in between,
// taking the addresses in a given order: every address forwards, each is
// probed once, and the harness's own CPU for it is logged (what the
// probe costs whatever the proxy; KPROXY_BENCH_PROBE_PORTS=10000 for the
// startup scenario's size).
func TestProbeDirect(t *testing.T) {
	n := 200
	if v := os.Getenv("KPROXY_BENCH_PROBE_PORTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("$KPROXY_BENCH_PROBE_PORTS=%q: want a positive number", v)
		}
	}
	b, err := startBackends(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addrs := directAddrs(b, n, ModeConn)
	order := make(chan int, n)
	for i := n - 1; i >= 0; i-- { // backwards: the order given is the order probed
		order <- i
	}
	cpu0, err := readProc(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	start := time.Now()
	r, err := awaitForwarding(context.Background(), nil, addrs, ModeConn, start, time.Minute, order)
	if err != nil {
		t.Fatal(err)
	}
	cpu1, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range r.Forward {
		if f <= 0 {
			t.Fatalf("%s never probed", addrs[i])
		}
	}
	if len(order) != 0 {
		t.Fatalf("%d addresses of the order left unprobed", len(order))
	}
	t.Logf("%d direct probes: %v, the harness's CPU %.2f s", n, time.Since(start).Round(time.Millisecond), (cpu1.CPU - cpu0.CPU).Seconds())
}

// A baseline kproxy measured in the run gets its column and kproxy's
// ratio to it (current over baseline); without one the table has neither.
func TestBaselineInTable(t *testing.T) {
	rep := &Report{Scenarios: []*ScenarioResult{{Name: "ports", Figures: []Figure{
		figure("conn: requests/s", "req/s", false, map[string]float64{TargetKproxy: 900, TargetBaseline: 1000, TargetDirect: 2000}),
		figure("conn: CPU per request", "µs", true, map[string]float64{TargetKproxy: 30, TargetBaseline: 20}),
	}}}}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(table.String(), "\n")
	if head := strings.Fields(lines[0]); head[len(head)-1] != "kproxy/baseline" || !slices.Contains(head, TargetBaseline) {
		t.Fatalf("header %q: want a baseline column and kproxy/baseline last", lines[0])
	}
	for i, want := range map[int]string{1: "0.90", 2: "1.50"} {
		if f := strings.Fields(lines[i]); f[len(f)-1] != want {
			t.Errorf("row %q: kproxy/baseline %s, want %s", lines[i], f[len(f)-1], want)
		}
	}
	rep.Scenarios[0].Figures = rep.Scenarios[0].Figures[:0]
	table.Reset()
	rep.WriteTable(&table)
	if strings.Contains(table.String(), "baseline") {
		t.Errorf("no baseline measured, yet the table has its column:\n%s", table.String())
	}
}

// Comparing with a baseline needs its binary; the baseline kproxy serves
// on a /16 of its own.
func TestBaselineOptions(t *testing.T) {
	o := Options{Kproxy: "kproxy", WorkDir: t.TempDir(), Compare: []string{TargetBaseline}}
	o.Defaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--baseline-kproxy") {
		t.Fatalf("baseline without a binary: %v", err)
	}
	o.Baseline = "kproxy-old"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ks := o.kproxies()
	if len(ks) != 2 || ks[0].name != TargetKproxy || ks[1].name != TargetBaseline || ks[1].bin != "kproxy-old" {
		t.Fatalf("kproxies %+v", ks)
	}
	if a, b := hostIP(ks[0].net, 0), hostIP(ks[1].net, 0); a == b || b != "127.5.0.1" {
		t.Errorf("kproxy on %s, baseline on %s: want 127.5.0.1, apart", a, b)
	}
}

// Slots of KPROXY_BENCH_NET_OFFSET never share a /16: each moves the
// whole plan past the one before it.
func TestPlanOffset(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, "1": 8, "2": 16, "30": 240, "31": 0, "-1": 0, "x": 0} {
		if got := planOffset(in); got != want {
			t.Errorf("planOffset(%q) = %d, want %d", in, got, want)
		}
	}
	if last := kernelNet + planOffset("1") - netsPerPlan; last >= backendNet+planOffset("1") {
		t.Errorf("slot 0's last /16 (%d) reaches into slot 1", last)
	}
}

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseMachineCPU("cpu  100 5 50 9000 40 3 7 2 30 0\ncpu0 50 2 25 4500 20 1 3 1 15 0\n")
	if err != nil || got != 1670*time.Millisecond {
		t.Fatalf("parseMachineCPU = %v, %v; want 1.67s (167 ticks busy: idle, iowait and guest left out)", got, err)
	}
	if _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Fatal("no cpu line: no error")
	}
}

func TestNginxConfig(t *testing.T) {
	b := &Backends{IPs: []string{"127.1.0.1", "127.1.0.2"}, UDPPort: 9053}
	path, err := writeNginxConfig(t.TempDir(), 3, b)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	cfg := string(raw)
	for _, want := range []string{"daemon off;", "worker_processes auto;", "stream {",
		"  upstream svc-00002 {\n    server 127.1.0.1:9053;\n    server 127.1.0.2:9053;\n  }\n  server {\n    listen 127.7.0.3:8053 udp reuseport;\n    proxy_pass svc-00002;"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}
