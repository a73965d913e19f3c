//go:build linux

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/watcher"
)

// TestHollowNodes measures a core serving N hollow nodes, as kubemark's
// hollow nodes measure kube-proxy: each node a real backend Source with its
// own remoting (its own listener and connections to the core), many per
// process in child processes of this test, so the core's CPU and memory
// are this process's own. The core follows the Kubernetes source's
// objects (Services, EndpointSlices and Nodes, as informers hand them over);
// a tenth of the services are internalTrafficPolicy Local, each has two
// endpoints on random nodes, nodes are spread over three zones. Churn: R
// endpoint changes/s for a while, each stamped with its
// last-change-trigger-time, which the core hands on with the change; a
// node measures change → its store from it. At the end every node must
// hold every changed service's last change (0 lost).
//
//	KPROXY_HOLLOW=100,1000 KPROXY_HOLLOW_SERVICES=10000 KPROXY_HOLLOW_RATE=100 \
//	  go test -run TestHollowNodes -v -timeout 60m ./bench/
func TestHollowNodes(t *testing.T) {
	if os.Getenv("KPROXY_HOLLOW_HOST") != "" {
		hollowHost(t)
		return
	}
	spec := os.Getenv("KPROXY_HOLLOW")
	if spec == "" {
		t.Skip("set KPROXY_HOLLOW=N[,N...] to measure a core with N hollow nodes")
	}
	raiseFDLimit()
	services := envInt("KPROXY_HOLLOW_SERVICES", 10000)
	rate := envInt("KPROXY_HOLLOW_RATE", 100)
	seconds := envInt("KPROXY_HOLLOW_SECONDS", 60)
	t.Logf("| nodes | services | changes | p50 | p99 | max | lost | core CPU per change | core RSS | core heap in use | RSS per node |")
	t.Logf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("KPROXY_HOLLOW: %v", err)
		}
		hollowRound(t, n, services, rate, time.Duration(seconds)*time.Second)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// hollowViews is the Kubernetes source's view without informers: the
// test hands the objects over as the informers would.
type hollowViews struct {
	*watcher.Objects
	mu     sync.Mutex
	notify func(watcher.Event)
}

func (v *hollowViews) Start(_ context.Context, notify func(watcher.Event)) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notify = notify
	return nil
}
func (v *hollowViews) Stop() {}

func (v *hollowViews) send(e watcher.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notify(e)
}

type hollowCluster struct {
	r     *rand.Rand
	nodes int
}

func (c *hollowCluster) service(i int) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "hollow", Name: fmt.Sprintf("svc-%d", i)},
		Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if i%10 == 0 {
		svc.Spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyLocal)
	}
	return svc
}

func (c *hollowCluster) slice(i, version int, at time.Time) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "hollow", Name: fmt.Sprintf("svc-%d-0", i),
		Labels:      map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", i)},
		Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}}}
	for e := range 2 {
		node := fmt.Sprintf("node-%d", c.r.IntN(c.nodes))
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 1+e, (i+version)/250%250, (i+version)%250+1)},
			NodeName:   &node,
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	return sl
}

// alikeOnly (KPROXY_HOLLOW_CHURN=alike) changes only services that every
// node sees alike, to compare a change's cost across node counts.
var alikeOnly = os.Getenv("KPROXY_HOLLOW_CHURN") == "alike"

func hollowRound(t *testing.T, n, services, rate int, churn time.Duration) {
	c := &hollowCluster{r: rand.New(rand.NewPCG(uint64(n), 1)), nodes: n}
	views := &hollowViews{Objects: watcher.NewObjects(watcher.Options{}, zerolog.Nop())}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core, err := remote.StartCore(ctx, remote.CoreConfig{Views: views, Remote: remote.Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Stop()
	for i := range n {
		views.send(watcher.NodeEvent(watcher.Added, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Labels: map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}}}))
	}
	start := time.Now().Add(-time.Hour) // before the core: no trigger time of the initial state
	for i := range services {
		views.send(watcher.Event{Kind: "Service", Op: watcher.Added, Object: c.service(i)})
		views.send(watcher.Event{Kind: "EndpointSlice", Op: watcher.Added, Object: c.slice(i, 0, start)})
	}

	hosts := startHollowHosts(t, n, core.Address())
	defer stopHollow(hosts)

	// Churn: rate endpoint changes/s, each a random service's slice.
	last := map[int]time.Time{}
	versions := make([]int, services)
	if dir := os.Getenv("KPROXY_HOLLOW_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("core-%d.cpu.pprof", n)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := cpuTime()
	began := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	changes := int(churn.Seconds()) * rate
	made := newProgress(t, "changes made", changes)
	for k := range changes {
		made.at(k)
		<-tick.C
		i := c.r.IntN(services)
		if alikeOnly && i%10 == 0 {
			i++ // a service every node sees alike (Cluster policy)
		}
		versions[i]++
		now := time.Now()
		last[i] = now
		views.send(watcher.Event{Kind: "EndpointSlice", Op: watcher.Updated, Object: c.slice(i, versions[i], now)})
	}
	tick.Stop()
	all, lost := collectHollow(t, hosts, last)
	cpu := cpuTime() - cpu0
	elapsed := time.Since(began)
	rss := rssBytes()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if dir := os.Getenv("KPROXY_HOLLOW_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("core-%d.heap.pprof", n)))
		if err != nil {
			t.Fatal(err)
		}
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	us := func(q float64) time.Duration {
		return (time.Duration(all.ValueAtQuantile(q)) * time.Microsecond).Round(100 * time.Microsecond)
	}
	t.Logf("| %d | %d | %d in %v | %v | %v | %v | %d | %v | %d MiB | %d MiB | %.0f KiB |", n, services, changes, elapsed.Round(time.Second),
		us(50), us(99), (time.Duration(all.Max()) * time.Microsecond).Round(time.Millisecond), lost,
		(cpu / time.Duration(changes)).Round(time.Microsecond), rss>>20, ms.HeapInuse>>20, float64(rss)/1024/float64(n))
	if lost > 0 {
		t.Errorf("%d nodes × services did not get their last change", lost)
	}
}

// startHollowHosts starts n hollow nodes, 100 per child process, following
// the core at core (or, with env's kubeconfig, each watching the API
// server), and returns once every one has its first state; they stop
// when the caller calls stopHollow.
func startHollowHosts(t *testing.T, n int, core string, env ...string) []*hollowChild {
	const perHost = 100
	var hosts []*hollowChild
	for first := 0; first < n; first += perHost {
		var names []string
		for i := first; i < min(n, first+perHost); i++ {
			names = append(names, fmt.Sprintf("node-%d", i))
		}
		h, err := startHollowChild(core, names, env...)
		if err != nil {
			stopHollow(hosts)
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	ready := newProgress(t, "hollow nodes ready", n)
	for i, h := range hosts {
		if err := h.expectLine("ready"); err != nil {
			stopHollow(hosts)
			t.Fatalf("hollow host: %v", err)
		}
		ready.at(min(n, (i+1)*perHost))
	}
	return hosts
}

// stopHollow ends the hosts' processes: a round's nodes must not load
// the next round.
func stopHollow(hosts []*hollowChild) {
	for _, h := range hosts {
		h.stop()
	}
}

// collectHollow tells every host which change of each service came last,
// and returns the hosts' change → store latencies (µs) and how many node ×
// service pairs did not get their last change.
func collectHollow(t *testing.T, hosts []*hollowChild, last map[int]time.Time) (*hdrhistogram.Histogram, int) {
	for _, h := range hosts {
		w := bufio.NewWriter(h.in)
		for i, at := range last {
			fmt.Fprintf(w, "expect hollow/svc-%d %d\n", i, at.UnixNano())
		}
		fmt.Fprintln(w, "end")
		w.Flush()
	}
	all := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	lost := 0
	for _, h := range hosts {
		line, err := h.line()
		if err != nil {
			t.Fatalf("hollow host: %v", err)
		}
		var res hollowResult
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("hollow host's result %q: %v", line, err)
		}
		all.Merge(hdrhistogram.Import(res.Hist))
		lost += res.Lost
	}
	return all, lost
}

// hollowResult is a host's report: its nodes' change → store latencies
// (µs) and how many node × service pairs missed their last change.
type hollowResult struct {
	Hist *hdrhistogram.Snapshot
	Lost int
}

type hollowChild struct {
	cmd *exec.Cmd
	in  *os.File
	out *bufio.Reader
}

// startHollowChild starts a host of nodes, following the core at core,
// or each watching the API server itself with env's kubeconfig.
func startHollowChild(core string, nodes []string, env ...string) (*hollowChild, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHollowNodes$")
	cmd.Env = append(os.Environ(), "KPROXY_HOLLOW_HOST=1", "KPROXY_HOLLOW_CORE="+core, "KPROXY_HOLLOW_NODES="+strings.Join(nodes, ","))
	cmd.Env = append(cmd.Env, env...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	inR.Close()
	outW.Close()
	return &hollowChild{cmd: cmd, in: inW, out: bufio.NewReader(outR)}, nil
}

// line is the host's next protocol line (others, the test framework's, are skipped).
func (h *hollowChild) line() (string, error) {
	for {
		l, err := h.out.ReadString('\n')
		if err != nil {
			return "", err
		}
		if rest, ok := strings.CutPrefix(l, "hollow: "); ok {
			return strings.TrimSpace(rest), nil
		}
	}
}

func (h *hollowChild) expectLine(want string) error {
	got, err := h.line()
	if err == nil && got != want {
		err = fmt.Errorf("said %q, want %q", got, want)
	}
	return err
}

func (h *hollowChild) stop() {
	h.in.Close()
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	_ = h.cmd.Wait()
}

// hollowNode is one hollow node's source: a core's view of it over
// remoting, or its own informers on the API server (as kube-proxy on
// every node).
type hollowNode interface {
	Start(ctx context.Context, notify func(watcher.Event)) error
	Stop()
	TriggerTime(service string) time.Time
}

// hollowHost runs this process's hollow nodes, recording change → store
// from each change's trigger time. With KPROXY_HOLLOW_KUBECONFIG each
// watches the API server itself; otherwise each follows the core.
func hollowHost(t *testing.T) {
	core, kubeconfig := os.Getenv("KPROXY_HOLLOW_CORE"), os.Getenv("KPROXY_HOLLOW_KUBECONFIG")
	nodes := strings.Split(os.Getenv("KPROXY_HOLLOW_NODES"), ",")
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	hist := hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
	srcs := make([]hollowNode, len(nodes))
	for i, node := range nodes {
		var src hollowNode
		var record func(e watcher.Event) []string
		if kubeconfig != "" {
			ks, err := hollowInformers(kubeconfig, node)
			if err != nil {
				t.Fatalf("hollow node %s: %v", node, err)
			}
			src = ks
			// The consumer applies the objects (under mu: informers call
			// from their own goroutines).
			record = func(e watcher.Event) []string { return watcher.Affected(ks, e) }
		} else {
			src = remote.NewSource(remote.SourceConfig{Core: core, NodeName: node, Client: "hollow",
				Remote: remote.Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
			record = func(e watcher.Event) []string { return []string{e.Service} }
		}
		ready := false
		if err := src.Start(context.Background(), func(e watcher.Event) {
			mu.Lock()
			for _, svc := range record(e) {
				if at := src.TriggerTime(svc); ready && !at.IsZero() {
					_ = hist.RecordValue(int64(time.Since(at) / time.Microsecond))
				}
			}
			mu.Unlock()
			cond.Broadcast()
		}); err != nil {
			t.Fatalf("hollow node %s: %v", node, err)
		}
		mu.Lock()
		ready = true
		mu.Unlock()
		srcs[i] = src
	}
	fmt.Println("hollow: ready")
	expect := map[string]time.Time{}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 1 && f[0] == "end" {
			break
		}
		if len(f) == 3 && f[0] == "expect" {
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			expect[f[1]] = time.Unix(0, ns)
		}
	}
	// Wait (up to a minute) for every node to hold every last change.
	deadline := time.Now().Add(time.Minute)
	timer := time.AfterFunc(time.Minute, cond.Broadcast)
	defer timer.Stop()
	lost := 0
	mu.Lock()
	for {
		lost = 0
		for _, src := range srcs {
			for svc, at := range expect {
				// Trigger times go through RFC 3339 text: compare to the microsecond.
				if src.TriggerTime(svc).Before(at.Truncate(time.Microsecond)) {
					lost++
				}
			}
		}
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		cond.Wait()
	}
	res, _ := json.Marshal(hollowResult{Hist: hist.Export(), Lost: lost})
	mu.Unlock()
	fmt.Println("hollow: " + string(res))
	for _, src := range srcs {
		src.Stop()
	}
	os.Exit(0)
}

// progress logs how far a long phase is, every 10 s: hollow runs take
// minutes.
type progress struct {
	t     *testing.T
	what  string
	total int
	last  time.Time
}

func newProgress(t *testing.T, what string, total int) *progress {
	return &progress{t: t, what: what, total: total, last: time.Now()}
}

func (p *progress) at(done int) {
	p.t.Helper()
	if time.Since(p.last) >= 10*time.Second {
		p.t.Logf("%s: %d of %d", p.what, done, p.total)
		p.last = time.Now()
	}
}

// raiseFDLimit lifts the open files limit as far as the kernel allows
// (root only; otherwise the hard limit stands): the core holds a few
// sockets per node, and a host a few per node it runs.
func raiseFDLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Max < 1<<20 {
		l.Cur, l.Max = 1<<20, 1<<20
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
