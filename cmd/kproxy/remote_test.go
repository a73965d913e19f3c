package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// localService renders a Service with internalTrafficPolicy Local and one
// EndpointSlice whose endpoints sit on the given nodes (ip -> node).
func localService(name, clusterIP string, port, targetPort int, endpoints [][2]string) string {
	var eps strings.Builder
	for _, e := range endpoints {
		fmt.Fprintf(&eps, "- addresses: [%q]\n  nodeName: %s\n", e[0], e[1])
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  clusterIP: %[2]s
  type: NodePort
  internalTrafficPolicy: Local
  externalTrafficPolicy: Local
  ports: [{name: tcp, port: %[3]d, targetPort: %[4]d, nodePort: %[6]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: default
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: tcp, port: %[4]d}]
endpoints:
%[5]s`, name, clusterIP, port, targetPort, eps.String(), testNodePort)
}

// TestRemoteCoreServesEachNodeItsView: one core on a manifest file, two
// node proxies (node-a, node-b), each a process of its own, subscribed over
// protoactor remoting on real loopback sockets; a Local-policy service
// whose endpoints sit on both nodes: each node proxy serves only its own
// node's endpoints (real connections through each one's proxy port), and
// a change of endpoints is served as each node's view says.
func TestRemoteCoreServesEachNodeItsView(t *testing.T) {
	port := backendsOn(t, "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14")
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port,
		[][2]string{{"127.0.0.11", "node-a"}, {"127.0.0.12", "node-b"}, {"127.0.0.13", "node-b"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	coreMetrics := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest, "--serve-metrics-address", coreMetrics)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	pa, pb := freeTCPPort(t), freeTCPPort(t)
	a := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa)...)
	b := startProc(t, "node-b", nodeArgs(coreAddr, "node-b", pb)...)
	a.waitLog(t, "source synced", 1, 30*time.Second)
	b.waitLog(t, "source synced", 1, 30*time.Second)
	core.waitLog(t, "backend subscribed", 2, 30*time.Second)
	for _, node := range []string{`"node":"node-a"`, `"node":"node-b"`} {
		if !strings.Contains(core.logs.String(), node) {
			t.Fatalf("core logged no subscription with %s", node)
		}
	}
	addrA, addrB := nodeAddr(pa), nodeAddr(pb)
	awaitNames(t, addrA, 1, "127.0.0.11")
	awaitNames(t, addrB, 10, "127.0.0.12", "127.0.0.13")
	if got := namesThrough(t, addrA, 20); len(got) != 1 || got["127.0.0.11"] != 20 {
		t.Fatalf("node-a served %v, want only its own endpoint 127.0.0.11", got)
	}
	if got := namesThrough(t, addrB, 20); len(got) != 2 || got["127.0.0.12"] == 0 || got["127.0.0.13"] == 0 {
		t.Fatalf("node-b served %v, want both its endpoints 127.0.0.12 and .13", got)
	}

	// A new endpoint on node-a: node-a serves it, node-b still serves
	// only its own (the endpoint is in its view too, not Local there).
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port,
		[][2]string{{"127.0.0.11", "node-a"}, {"127.0.0.14", "node-a"}, {"127.0.0.12", "node-b"}, {"127.0.0.13", "node-b"}}))
	a.waitLog(t, "source changes applied", strings.Count(a.logs.String(), "source changes applied")+1, 30*time.Second)
	awaitNames(t, addrA, 10, "127.0.0.11", "127.0.0.14")
	if got := namesThrough(t, addrB, 20); len(got) != 2 || got["127.0.0.12"] == 0 || got["127.0.0.13"] == 0 {
		t.Fatalf("node-b served %v after node-a's change", got)
	}

	// The core's /metrics: two subscriptions, two snapshots, the deltas.
	core.waitLog(t, "serving core metrics", 1, 10*time.Second)
	resp, err := http.Get("http://" + coreMetrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Two deltas: with both traffic policies Local a node's view still
	// holds every node's endpoints as the cluster's (which the node's and
	// pods' own traffic to the external destinations uses), so node-a's
	// new endpoint reaches node-b's view too, outside both its scopes.
	for _, want := range []string{"kproxy_core_subscriptions 2\n", "kproxy_core_snapshots_total 2\n", "kproxy_core_deltas_total 2\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("core /metrics lacks %q:\n%s", want, grepLines(string(body), "kproxy_core"))
		}
	}
}

// replaceFile writes and renames into place, as editors do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteWatchJSON: kproxy watch --source remote:ADDR --json (KPNG's
// kpng-json against a core) prints node-a's view exactly as kproxy watch
// on the same manifests does locally (the golden file).
func TestRemoteWatchJSON(t *testing.T) {
	manifest, err := filepath.Abs("testdata/watch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/watch.golden")
	if err != nil {
		t.Fatal(err)
	}
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	w := startProc(t, "watch", "watch", "--source", "remote:"+coreAddr, "--node-name", "node-a", "--json")
	w.waitLog(t, string(want), 1, 30*time.Second)
	core.waitLog(t, `"client":"kproxy watch"`, 1, 10*time.Second)

	// --callout (kpng-callout) gets the same lines on its standard input.
	c := startProc(t, "callout", "watch", "--source", "remote:"+coreAddr, "--node-name", "node-a", "--callout", "echo BEGIN; cat; echo END")
	c.waitLog(t, "BEGIN\n"+string(want[:len(want)-1])+"END\n", 1, 30*time.Second)
}
