//go:build linux

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/bench/harness"
	"github.com/kproxy/kproxy/test/kubetest"
	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/kubesource"
)

// TestHollowNodesKube is TestHollowNodes through a real API server: N Node
// objects (as kwok's: no kubelet behind them), S Services and their
// EndpointSlices, churn made by updating slices through the API server.
// Two ways to serve N hollow nodes, in the same run on the same objects:
// a core watching the API server once (kubesource, every Node) and the
// nodes following it, and each node watching the API server itself (its
// own informers and connection, as kube-proxy on every node). Figures:
// change → every node's store, the API server's CPU per change and its
// watches.
//
//	KPROXY_HOLLOW_KUBE=1000 KPROXY_HOLLOW_SERVICES=1000 KPROXY_HOLLOW_RATE=20 \
//	  go test -run TestHollowNodesKube -v -timeout 60m ./bench/
func TestHollowNodesKube(t *testing.T) {
	spec := os.Getenv("KPROXY_HOLLOW_KUBE")
	if spec == "" {
		t.Skip("set KPROXY_HOLLOW_KUBE=N[,N...] (and KPROXY_APISERVER) to measure a core against direct watches through an API server")
	}
	harness.RaiseFDLimit()
	services := envInt("KPROXY_HOLLOW_SERVICES", 1000)
	rate := envInt("KPROXY_HOLLOW_RATE", 20)
	seconds := envInt("KPROXY_HOLLOW_SECONDS", 30)
	s := kubetest.Start(t)
	ctx := context.Background()
	maxNodes := 0
	var ns []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("KPROXY_HOLLOW_KUBE: %v", err)
		}
		ns, maxNodes = append(ns, n), max(maxNodes, n)
	}
	c := harness.NewHollowCluster(7, maxNodes)
	created := harness.NewPhaseProgress(t.Output(), "Nodes created", maxNodes)
	for i := range maxNodes {
		created.At(i)
		n := c.Node(i)
		n.Labels["type"] = "kwok"
		if _, err := s.Admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hollow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Hour)
	created = harness.NewPhaseProgress(t.Output(), "Services and EndpointSlices created", services)
	for i := range services {
		created.At(i)
		svc := c.Service(i)
		svc.Spec.ClusterIP = ""
		if _, err := s.Admin.CoreV1().Services("hollow").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admin.DiscoveryV1().EndpointSlices("hollow").Create(ctx, c.Slice(i, 0, before), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d Nodes, %d Services and EndpointSlices created", maxNodes, services)
	t.Logf("| nodes | served by | changes | p50 | p99 | max | lost | API server CPU per change | API server watches | core CPU per change | core RSS |")
	t.Logf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range ns {
		modes := []string{"core", "own informers"}
		if m := os.Getenv("KPROXY_HOLLOW_MODES"); m != "" {
			modes = strings.Split(m, ",")
		}
		for _, mode := range modes {
			hollowKubeRound(t, s, c, n, services, rate, time.Duration(seconds)*time.Second, mode)
		}
	}
}

func hollowKubeRound(t *testing.T, s *kubetest.Server, c *harness.HollowCluster, n, services, rate int, churn time.Duration, mode string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var coreAddr string
	var env []string
	if mode == "core" {
		client, err := kubernetes.NewForConfig(s.KproxyConfig)
		if err != nil {
			t.Fatal(err)
		}
		src, err := kubesource.New(client, kubesource.Options{AllNodes: true, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		core, err := remote.StartCore(ctx, remote.CoreConfig{Views: src, Remote: remote.Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		defer core.Stop()
		coreAddr = core.Address()
	} else {
		env = []string{"KPROXY_HOLLOW_KUBECONFIG=" + s.KproxyKubeconfig}
	}
	hosts, err := harness.StartHollowHosts(hollowHostCommand, n, coreAddr, t.Output(), env...)
	if err != nil {
		t.Fatal(err)
	}
	defer hosts.Stop()
	watches := apiserverWatches(t, s)
	api0, cpu0 := procCPU(t, s.PID()), harness.SelfCPU()
	began := time.Now()
	last := map[int]time.Time{}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	changes := int(churn.Seconds()) * rate
	made := harness.NewPhaseProgress(t.Output(), "changes made", changes)
	for k := range changes {
		made.At(k)
		<-tick.C
		i := c.Pick(services)
		now := time.Now()
		last[i] = now
		sl := c.Slice(i, k+1, now)
		cur, err := s.Admin.DiscoveryV1().EndpointSlices("hollow").Get(ctx, sl.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl.ResourceVersion = cur.ResourceVersion
		if _, err := s.Admin.DiscoveryV1().EndpointSlices("hollow").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	stores, err := hosts.Collect(last)
	if err != nil {
		t.Fatal(err)
	}
	api, cpu := procCPU(t, s.PID())-api0, harness.SelfCPU()-cpu0
	coreCPU, coreRSS := "", ""
	if mode == "core" {
		coreCPU = (cpu / time.Duration(changes)).Round(time.Microsecond).String()
		rss, _ := harness.ProcessRSS(os.Getpid())
		coreRSS = fmt.Sprintf("%d MiB", rss>>20)
	}
	t.Logf("| %d | %s | %d in %v | %v | %v | %v | %d | %v | %d | %s | %s |", n, mode, changes, time.Since(began).Round(time.Second),
		stores.P50, stores.P99, stores.Max, stores.Lost,
		(api / time.Duration(changes)).Round(time.Microsecond), watches, coreCPU, coreRSS)
	if stores.Lost > 0 {
		t.Errorf("%d nodes × services did not get their last change", stores.Lost)
	}
}

// hollowInformers is a hollow node watching the API server itself: its
// own client and connection, informers for Services, EndpointSlices and
// its own Node, as kube-proxy runs on every node.
func hollowInformers(kubeconfig, node string) (harness.HollowNode, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Dial = (&net.Dialer{}).DialContext // a connection of its own, not client-go's shared one
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	src, err := kubesource.New(client, kubesource.Options{Options: watcher.Options{NodeName: node}, Log: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	return informerNode{src}, nil
}

// informerNode is a hollow node on its own informers: the consumer
// applies the objects, and an event changes the services it affects.
type informerNode struct{ *kubesource.Source }

func (n informerNode) Changed(e watcher.Event) []string { return watcher.Affected(n.Source, e) }

// apiserverWatches is how many watches the API server is serving
// (apiserver_longrunning_requests, verb WATCH).
func apiserverWatches(t *testing.T, s *kubetest.Server) int {
	body, err := s.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	total := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "apiserver_longrunning_requests{") && strings.Contains(l, `verb="WATCH"`) {
			if f := strings.Fields(l); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				total += v
			}
		}
	}
	return int(total)
}

// procCPU is a process's CPU time so far (user and system).
func procCPU(t *testing.T, pid int) time.Duration {
	cpu, err := harness.ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}
