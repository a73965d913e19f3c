package filesource

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

const twoNodes = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.0.0.1
  internalTrafficPolicy: Local
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.1.0.1], nodeName: node-a}
- {addresses: [10.1.0.2], nodeName: node-b}
`

// localIPs lists the endpoints of the view's one service port marked Local.
func localIPs(t *testing.T, v watcher.View) []string {
	t.Helper()
	ports, err := v.Build("default/web")
	if err != nil || len(ports) != 1 {
		t.Fatalf("Build: %v, %d ports", err, len(ports))
	}
	var out []string
	for _, e := range ports[0].GetEndpoints() {
		if e.GetLocal() {
			out = append(out, e.GetIps()...)
		}
	}
	return out
}

// TestNodesFileSourceBuildsEachNodesView: one read of the manifests hands
// the objects over once, each node's view built from them with its own
// endpoints Local; a reload hands over only the objects that changed.
func TestNodesFileSourceBuildsEachNodesView(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte(twoNodes), 0o644); err != nil {
		t.Fatal(err)
	}
	src := NewNodesFileSource(path, watcher.Options{}, 10*time.Millisecond, zerolog.Nop())
	// The consumer applies the events, on its goroutine, as a core does.
	var mu sync.Mutex
	events := make(chan watcher.Event, 16)
	if err := src.Start(context.Background(), func(e watcher.Event) {
		mu.Lock()
		watcher.Affected(src, e)
		mu.Unlock()
		events <- e
	}); err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	if n := len(events); n != 2 {
		t.Fatalf("%d events for the first read, want 2 (the Service and its slice)", n)
	}
	for range 2 {
		<-events
	}
	mu.Lock()
	a, b := src.ViewFor("node-a"), src.ViewFor("node-b")
	if got := localIPs(t, a); len(got) != 1 || got[0] != "10.1.0.1" {
		t.Fatalf("node-a Local endpoints %v", got)
	}
	if got := localIPs(t, b); len(got) != 1 || got[0] != "10.1.0.2" {
		t.Fatalf("node-b Local endpoints %v", got)
	}
	if c := src.Classes("default/web"); !c.Nodes["node-a"] || !c.Nodes["node-b"] || len(c.Nodes) != 2 {
		t.Fatalf("classes %v: want node-a and node-b each their own", c)
	}
	mu.Unlock()
	// Move node-b's endpoint to node-a: the slice alone is handed over.
	moved := strings.Replace(twoNodes, "nodeName: node-b", "nodeName: node-a", 1)
	if err := os.WriteFile(path+".tmp", []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Kind != watcher.KindEndpointSlice || e.Op != watcher.Updated {
			t.Fatalf("event after the move: %s %s, want the EndpointSlice updated", e.Kind, e.Op)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the move")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := localIPs(t, a); len(got) != 2 {
		t.Fatalf("node-a Local endpoints after the move %v", got)
	}
	if got := localIPs(t, b); len(got) != 0 {
		t.Fatalf("node-b Local endpoints after the move %v", got)
	}
	if n := len(events); n != 0 {
		t.Fatalf("%d more events: the unchanged Service was handed over again", n)
	}
}

// TestStoreApply: upserts, deletes and endpoint updates report the
// services they touch; an identical upsert goes no further than the
// Tracker; an update keeps the definition held, and one of a port not
// held is an error.
func TestStoreApply(t *testing.T) {
	s := watcher.NewStore()
	spe := func(name string, port int32) *messages.ServicePortEndpoints {
		return &messages.ServicePortEndpoints{ServicePort: &messages.ServicePort{Key: &messages.ServicePortKey{Namespace: "ns", Name: name,
			PortName: "p", Protocol: messages.Protocol_TCP}, Port: port}}
	}
	apply := func(upserts []*messages.ServicePortEndpoints, deletes []*messages.ServicePortKey, updates []*messages.EndpointsUpdate) []string {
		t.Helper()
		ch, err := s.Apply(&messages.Delta{Upserts: upserts, Deletes: deletes, EndpointUpdates: updates})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	if ch := apply([]*messages.ServicePortEndpoints{spe("a", 1), spe("b", 2)}, nil, nil); len(ch) != 2 {
		t.Fatalf("changed %v", ch)
	}
	// An upsert counts as a change without a comparison (a core sends
	// only what changed); the Tracker's diff drops one that is not.
	tracker := watcher.NewTracker(s)
	tracker.Mark("")
	tracker.Flush()
	ch := apply([]*messages.ServicePortEndpoints{spe("a", 1)}, nil, nil)
	if len(ch) != 1 || ch[0] != "ns/a" {
		t.Fatalf("an upsert changed %v, want ns/a", ch)
	}
	tracker.Mark("ns/a")
	if f := tracker.Flush(); len(f.Upserts)+len(f.Deletes) != 0 {
		t.Fatalf("an identical upsert went on from the Tracker: %v", f)
	}
	if ch := apply(nil, []*messages.ServicePortKey{spe("b", 2).GetServicePort().GetKey()}, nil); len(ch) != 1 || ch[0] != "ns/b" {
		t.Fatalf("delete changed %v", ch)
	}
	if all := s.All(); len(all) != 1 || all[0].GetServicePort().GetKey().GetName() != "a" {
		t.Fatalf("All %v", all)
	}

	held := s.All()[0].GetServicePort()
	eps := []*messages.Endpoint{{Ips: []string{"192.0.2.1"}, Port: 80}}
	if ch := apply(nil, nil, []*messages.EndpointsUpdate{{Key: held.GetKey(), Endpoints: eps}}); len(ch) != 1 || ch[0] != "ns/a" {
		t.Fatalf("an endpoint update changed %v, want ns/a", ch)
	}
	if got := s.All()[0]; got.GetServicePort() != held || len(got.GetEndpoints()) != 1 {
		t.Fatalf("after an endpoint update: %v; want the definition held, with the endpoint", got)
	}
	if _, err := s.Apply(&messages.Delta{EndpointUpdates: []*messages.EndpointsUpdate{{Key: spe("b", 2).GetServicePort().GetKey(), Endpoints: eps}}}); err == nil {
		t.Fatal("an endpoint update of a port not held was taken")
	}
}
