package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// apiWatches reads the API server's own count of watches open now, by
// resource (apiserver_longrunning_requests{verb="WATCH"}), from /metrics.
func apiWatches(t *testing.T, c kubernetes.Interface) map[string]float64 {
	t.Helper()
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		i := strings.Index(line, `resource="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		res := line[i+len(`resource="`):]
		res = res[:strings.IndexByte(res, '"')]
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err == nil {
			out[res] += v
		}
	}
	return out
}

// TestRemoteKubeOneWatchServesThreeNodes: the real API server, one core
// (kproxy watch --serve --source kube) and three node proxies with
// different node names, each a process; a Local-policy service whose
// endpoints sit on node-a and node-b (backends in a network namespace):
// each node proxy serves exactly its node-local view, checked with real
// connections (node-c has no local endpoint: refused), and the API server
// counts one set of watches (services, endpointslices, nodes), not three.
func TestRemoteKubeOneWatchServesThreeNodes(t *testing.T) {
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	ips := []netip.Addr{bn.AddIP(t), bn.AddIP(t), bn.AddIP(t)}
	kubeBackends(t, bn, 8080, ips...)
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelTopologyZone: "zone-1"}}}
		if _, err := s.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := s.Admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		// Named for this proxy, so the kubernetes service takes no proxy port.
		ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: "default", Labels: map[string]string{"service.kubernetes.io/service-proxy-name": "remote-test"}},
		// A node port with Local policies: each node proxy serves it on an
		// address of its own (they share the cluster IP on this host).
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "tcp", Port: 18080, TargetPort: intstr.FromInt32(8080), NodePort: testNodePort}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "local-1", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: "local", discoveryv1.LabelManagedBy: "kproxy-tests"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{ips[0].String()}, NodeName: ptr.To("node-a")},
			{Addresses: []string{ips[1].String()}, NodeName: ptr.To("node-b")},
			{Addresses: []string{ips[2].String()}, NodeName: ptr.To("node-b")},
		},
	}
	if _, err := s.Admin.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := apiWatches(t, s.Admin)

	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", "watch", "--serve", coreAddr, "--source", "kube", "--kubeconfig", s.KproxyKubeconfig,
		"--service-proxy-name", "remote-test", "--min-sync-period", "20ms", "--log-level", "debug", "--log-format", "json")
	core.waitLog(t, "core serving", 1, 60*time.Second)
	nodes := map[string]int{"node-a": freeTCPPort(t), "node-b": freeTCPPort(t), "node-c": freeTCPPort(t)}
	procs := map[string]*proc{}
	metricsC := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	for n, p := range nodes {
		var extra []string
		if n == "node-c" {
			extra = []string{"--metrics-bind-address", metricsC}
		}
		procs[n] = startProc(t, n, nodeArgs(coreAddr, n, p, extra...)...)
	}
	for _, p := range procs {
		p.waitLog(t, "source synced", 1, 60*time.Second)
		p.waitLog(t, "service port listening", 1, 30*time.Second)
	}
	core.waitLog(t, "backend subscribed", 3, 10*time.Second)
	addr := func(n string) string { return nodeAddr(nodes[n]) }
	a0, a1, a2 := netip.AddrPortFrom(ips[0], 8080).String(), netip.AddrPortFrom(ips[1], 8080).String(), netip.AddrPortFrom(ips[2], 8080).String()
	awaitNames(t, addr("node-a"), 10, a0)
	awaitNames(t, addr("node-b"), 10, a1, a2)
	if got := namesThrough(t, addr("node-a"), 20); len(got) != 1 || got[a0] != 20 {
		t.Fatalf("node-a served %v, want only %s", got, a0)
	}
	if got := namesThrough(t, addr("node-b"), 20); len(got) != 2 || got[a1] == 0 || got[a2] == 0 {
		t.Fatalf("node-b served %v, want %s and %s", got, a1, a2)
	}
	for range 5 {
		if name, err := tryReadName(addr("node-c")); err == nil {
			t.Fatalf("node-c (no local endpoint, Local policy) served %s", name)
		}
	}
	t.Logf("service %s: node-a serves %s, node-b %s and %s, node-c nothing", svc.Spec.ClusterIP, a0, a1, a2)

	after := apiWatches(t, s.Admin)
	for _, res := range []string{"services", "endpointslices", "nodes"} {
		t.Logf("API server watches of %s: %v before the core, %v with the core and 3 node proxies", res, before[res], after[res])
		if d := after[res] - before[res]; d != 1 {
			t.Fatalf("watches of %s went from %v to %v: want one more (the core's), not one per node", res, before[res], after[res])
		}
	}

	// A change through the API server: ips[2] moves from node-b to node-c,
	// which now serves it; node-b keeps only ips[1].
	slice.Endpoints = []discoveryv1.Endpoint{slice.Endpoints[0], slice.Endpoints[1], {Addresses: []string{ips[2].String()}, NodeName: ptr.To("node-c")}}
	cur, err := s.Admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "local-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.ResourceVersion = cur.ResourceVersion
	// As the EndpointSlice controller does: when the change happened, which
	// the core passes on for the node's network programming latency.
	slice.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}
	if _, err := s.Admin.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitNames(t, addr("node-c"), 5, a2)
	awaitNames(t, addr("node-b"), 10, a1)
	resp, err := http.Get("http://" + metricsC + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "kubeproxy_network_programming_duration_seconds_count 1\n") {
		t.Fatalf("node-c observed no network programming latency from the core's trigger time:\n%s", grepLines(string(body), "network_programming"))
	}

	// The core killed under load on all three nodes; the slice changed
	// through the API server while it is down (ips[0] moves from node-a to
	// node-c); a new core applies it within seconds, 0 connections failed.
	load := startConnLoad(t, 2, 2*time.Minute, addr("node-b"), addr("node-c"))
	loadA := startConnLoad(t, 1, 2*time.Minute, addr("node-a"))
	core.kill()
	for _, p := range procs {
		p.waitLog(t, "lost the core", 1, 30*time.Second)
	}
	slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ips[0].String()}, NodeName: ptr.To("node-c")},
		{Addresses: []string{ips[1].String()}, NodeName: ptr.To("node-b")}, {Addresses: []string{ips[2].String()}, NodeName: ptr.To("node-c")}}
	cur, err = s.Admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "local-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.ResourceVersion = cur.ResourceVersion
	if _, err := s.Admin.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	loadA.stop() // node-a is about to lose its only endpoint: its load ends before
	core2 := startProc(t, "core-restarted", "watch", "--serve", coreAddr, "--source", "kube", "--kubeconfig", s.KproxyKubeconfig,
		"--service-proxy-name", "remote-test", "--min-sync-period", "20ms", "--log-level", "debug", "--log-format", "json")
	core2.waitLog(t, "core serving", 1, 60*time.Second)
	back := time.Now()
	awaitNames(t, addr("node-c"), 10, a0, a2)
	applied := time.Since(back)
	load.stop()
	t.Logf("core killed under load: node-b and node-c %d requests ok, %d failed (through the restart); node-a %d ok, %d failed (while it was down); the change made meanwhile served by node-c %v after the new core served",
		load.ok.Load(), load.failed.Load(), loadA.ok.Load(), loadA.failed.Load(), applied.Round(time.Millisecond))
	for _, l := range []*connLoad{load, loadA} {
		if f := l.failed.Load(); f != 0 || l.ok.Load() == 0 {
			t.Fatalf("%d of %d requests failed (first: %v)", f, f+l.ok.Load(), l.errs)
		}
	}
	core2.waitLog(t, "backend subscribed", 3, 10*time.Second)
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
