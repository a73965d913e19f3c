package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/bench/harness"
	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/kubetest"
)

// TestBenchChurnKube runs kproxy-bench's churn scenario through a real
// API server (the test harness's kube-apiserver, $KPROXY_APISERVER):
// EndpointSlice updates at a rate across services while traffic flows,
// change-to-applied latency from the update to the first connection that
// reaches the new endpoint. Small by default; larger with
// KPROXY_BENCH_CHURN_SERVICES, _RATE and _DURATION, e.g.
// (KPROXY_BENCH_KPROXY=bin/kproxy measures that build of kproxy instead of
// one the test builds; KPROXY_BENCH_BASELINE=PATH measures that build too,
// on the same API server and services, the two taking turns for
// KPROXY_BENCH_CHURN_ROUNDS rounds)
//
//	KPROXY_BENCH_CHURN_SERVICES=10000 KPROXY_BENCH_CHURN_RATE=1000 KPROXY_BENCH_CHURN_DURATION=10s \
//	  go test -run TestBenchChurnKube -v ./cmd/kproxy-bench/
func TestBenchChurnKube(t *testing.T) {
	if runtime.GOOS != "linux" || os.Getenv(kubetest.EnvAPIServer) == "" {
		t.Skipf("needs Linux and $%s (make test builds it)", kubetest.EnvAPIServer)
	}
	services := envInt(t, "KPROXY_BENCH_CHURN_SERVICES", 100)
	rate := float64(envInt(t, "KPROXY_BENCH_CHURN_RATE", 50))
	duration, err := time.ParseDuration(envOr("KPROXY_BENCH_CHURN_DURATION", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	const port = 9000
	// Eight backend addresses, not two: kproxy dials each from the node's
	// address, and every connection closed leaves a TIME_WAIT entry for
	// 60 s. Against two addresses, one round's load and probes (tens of
	// thousands of connections, more when a build is slow and the probes
	// repeat) left the next round's connect searching a nearly full
	// ephemeral port range: kproxy then spent 1.5 cores inside connect
	// (its CPU profile), and the rounds after a slow one were slow too.
	var pool []string
	for range 8 {
		ip := bn.AddIP(t).String()
		var b *backends.TCP
		if err := bn.Do(func() (err error) {
			b, err = backends.StartTCP(ip, netip.AddrPortFrom(netip.MustParseAddr(ip), port).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		pool = append(pool, ip)
	}
	src, err := newKubeChurn(context.Background(), s, "bench", services, port, pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services and slices created", services)
	// The kproxy under test: built from this tree, or a build of kproxy
	// ($KPROXY_BENCH_KPROXY, e.g. bin/kproxy, or one made to profile).
	exe := os.Getenv("KPROXY_BENCH_KPROXY")
	if exe == "" {
		exe = binarytest.Build(t)
	}
	// KPROXY_BENCH_BASELINE: another build (e.g. main's) measured on the
	// same API server and services, the two taking turns for
	// KPROXY_BENCH_CHURN_ROUNDS rounds each, so drift hits both alike.
	builds := []struct{ name, exe string }{{harness.TargetKproxy, exe}}
	if b := os.Getenv("KPROXY_BENCH_BASELINE"); b != "" {
		builds = []struct{ name, exe string }{{harness.TargetBaseline, b}, {harness.TargetKproxy, exe}}
	}
	rounds := envInt(t, "KPROXY_BENCH_CHURN_ROUNDS", 1)
	for round := range rounds {
		for _, b := range builds {
			if round > 0 || b != builds[0] {
				// Every service back on its first endpoint, as the scenario assumes.
				if err := src.reset(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			runKubeChurn(t, s, src, b.name, b.exe, services, rate, duration)
		}
	}
}

// runKubeChurn runs the churn scenario once with the kproxy binary exe.
func runKubeChurn(t *testing.T, s *kubetest.Server, src *kubeChurn, name, exe string, services int, rate float64, duration time.Duration) {
	t.Helper()
	// The API server and etcd (one process) share the machine with kproxy,
	// the driver and the load: their CPU per change made shows how many
	// changes a second the machine can take at all.
	apiCPU0, cpuErr := harness.ProcessCPU(s.PID())
	rep, err := harness.Run(context.Background(), harness.Options{
		Kproxy: exe, KproxyArgs: []string{"--kubeconfig", s.KproxyKubeconfig},
		Services: services, ChurnRate: rate, Duration: duration, Clients: 4, LoadRate: 500,
		WorkDir: filepath.Join(t.TempDir(), "work"), ChurnSource: src,
	}, []string{"churn"})
	if rep != nil {
		var b strings.Builder
		rep.WriteTable(&b)
		t.Logf("%s (%s, %s):\n%s", name, exe, rep.Version, b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Scenarios[0].Churn
	if apiCPU1, err := harness.ProcessCPU(s.PID()); err == nil && cpuErr == nil && c.Changes > 0 {
		cpu := apiCPU1 - apiCPU0
		t.Logf("API server and etcd: %.2f s of CPU during the scenario (kproxy's initial list included), %.2f ms per change made",
			cpu.Seconds(), cpu.Seconds()*1000/float64(c.Changes))
	}
	if c.Applied == 0 || c.NotApplied != 0 || c.FailedReqs != 0 {
		t.Errorf("%s churn: %d applied, %d not applied, %d of %d requests failed %v", name, c.Applied, c.NotApplied, c.FailedReqs, c.Requests, c.ErrorSamples)
	}
}

// kubeChurn holds the churn's services in a real API server: one Service
// (clusterIP from the server's loopback range) and one EndpointSlice each.
type kubeChurn struct {
	c      kubernetes.Interface
	ns     string
	pool   []string
	addrs  []string
	slices []*discoveryv1.EndpointSlice // the latest of each, for updates
}

func newKubeChurn(ctx context.Context, s *kubetest.Server, ns string, n, port int, pool []string) (*kubeChurn, error) {
	k := &kubeChurn{c: s.Admin, ns: ns, pool: pool, addrs: make([]string, n), slices: make([]*discoveryv1.EndpointSlice, n)}
	if _, err := k.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	// Sixteen at a time: creating thousands one by one takes minutes.
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := k.create(ctx, s, i, port); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return nil, err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return k, nil
}

func (k *kubeChurn) create(ctx context.Context, s *kubetest.Server, i, port int) error {
	name := fmt.Sprintf("svc-%05d", i)
	ip := s.ServiceIP(uint16(i + 2)) // 1 is the kubernetes Service's
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec: corev1.ServiceSpec{ClusterIP: ip.String(), Ports: []corev1.ServicePort{{Name: "tcp", Port: 8080, TargetPort: intstr.FromInt32(int32(port))}}}}
	if _, err := k.c.CoreV1().Services(k.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To(int32(port))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{k.pool[i%len(k.pool)]}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	out, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create slice %s: %w", name, err)
	}
	k.slices[i] = out
	k.addrs[i] = netip.AddrPortFrom(ip, 8080).String()
	return nil
}

func (k *kubeChurn) Name() string         { return harness.ChurnKube }
func (k *kubeChurn) KproxyArgs() []string { return []string{"--source", "kube"} }
func (k *kubeChurn) Addrs() []string      { return k.addrs }
func (k *kubeChurn) Pool() []string       { return k.pool }

// Set updates service i's slice, as the EndpointSlice controller would,
// trigger time included (kproxy's network programming metric reads it).
func (k *kubeChurn) Set(ctx context.Context, i int, endpoint string) error {
	s := k.slices[i].DeepCopy()
	s.Endpoints[0].Addresses = []string{endpoint}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
	out, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update slice %s: %w", s.Name, err)
	}
	k.slices[i] = out
	return nil
}

// reset moves every service back to its first endpoint (pool[i%len]),
// sixteen updates at a time.
func (k *kubeChurn) reset(ctx context.Context) error {
	work := make(chan int)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				want := k.pool[i%len(k.pool)]
				if k.slices[i].Endpoints[0].Addresses[0] == want {
					continue
				}
				if err := k.Set(ctx, i, want); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range k.slices {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	n, err := strconv.Atoi(envOr(name, strconv.Itoa(def)))
	if err != nil {
		t.Fatalf("$%s: %v", name, err)
	}
	return n
}
