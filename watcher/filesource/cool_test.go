package filesource

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/test/modeltest"
	"github.com/kproxy/kproxy/watcher"
)

// pollUntilEmitted polls s until it emits a result.
func pollUntilEmitted(t *testing.T, s *FileSource, st *pollState) *Result {
	t.Helper()
	var res *Result
	for deadline := time.Now().Add(waitTimeout); res == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no result")
		}
		if wait := s.poll(context.Background(), st, func(r *Result) { res = r }); wait > 0 && res == nil {
			time.Sleep(wait) // the settle time poll asked for
		}
	}
	return res
}

// assertCooled checks that the source keeps no decoded object of any
// file, only their documents.
func assertCooled(t *testing.T, st *pollState) {
	t.Helper()
	docs := 0
	for name, f := range st.files {
		for _, s := range f.part.services {
			if s.obj.obj != nil || len(s.obj.raw) == 0 {
				t.Errorf("%s: Service %s kept decoded (%v) or without its document (%d bytes)", name, s.obj.name, s.obj.obj != nil, len(s.obj.raw))
			}
			docs++
		}
		for _, s := range f.part.slices {
			if s.obj.obj != nil || len(s.obj.raw) == 0 {
				t.Errorf("%s: EndpointSlice %s kept decoded (%v) or without its document (%d bytes)", name, s.obj.name, s.obj.obj != nil, len(s.obj.raw))
			}
			docs++
		}
	}
	if docs == 0 {
		t.Fatal("no documents kept")
	}
}

// Between polls the file source keeps each file's documents, not their
// decoded objects (2 KiB per service port): a service whose slice changed
// in another file is built from its document decoded again, whichever
// path decoded it (the converter, the YAML parser for a comment, a List's
// item), and gives what a fresh load gives.
func TestFileSourceKeepsDocumentsNotObjects(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a-svc.yaml", "# parsed by the YAML parser\n"+serviceYAML("web")+"---\n"+
		`apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Service, metadata: {name: db}, spec: {clusterIP: 10.0.0.2, ports: [{port: 5432}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: db-1, labels: {kubernetes.io/service-name: db}}
  addressType: IPv4
  ports: [{port: 5432}]
  endpoints: [{addresses: ["10.2.0.1"]}]
`)
	writeFile(t, dir, "b-eps.yaml", sliceYAML("web", "10.1.0.1"))
	s := NewFileSource(dir, watcher.Options{}, time.Hour, zerolog.Nop())
	var st pollState
	r := pollUntilEmitted(t, s, &st)
	assertCooled(t, &st)
	assertSameAsLoad(t, dir, r)

	// Rewritten with another size, so its stamp surely changes.
	writeFile(t, dir, "b-eps.yaml", sliceYAML("web", "10.1.0.222"))
	if err := os.Chtimes(filepath.Join(dir, "b-eps.yaml"), time.Now().Add(time.Minute), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r2 := pollUntilEmitted(t, s, &st)
	if got := endpointsOf(t, r2, "default/web:/TCP"); !slices.Equal(got, []string{"10.1.0.222:8080[ready,serving,internal,external]"}) {
		t.Fatalf("after the slice's file changed, endpoints = %v", got)
	}
	assertCooled(t, &st)
	assertSameAsLoad(t, dir, r2)
	// db's documents did not change: its ports are the ones built before.
	if a, b := portsOf(r, "default/db:/TCP"), portsOf(r2, "default/db:/TCP"); a == nil || a != b {
		t.Errorf("db's service port was built again (%p, %p), its documents unchanged", a, b)
	}
}

func assertSameAsLoad(t *testing.T, dir string, r *Result) {
	t.Helper()
	want, err := LoadPath(dir, watcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.ServicePorts) != len(r.ServicePorts) || len(r.ServicePorts) != 2 || len(r.Errors) != 0 {
		t.Fatalf("source gave %v (errors %v), a load %v", modeltest.KeyIDs(r.ServicePorts), r.Errors, modeltest.KeyIDs(want.ServicePorts))
	}
	for i := range want.ServicePorts {
		if !proto.Equal(want.ServicePorts[i], r.ServicePorts[i]) {
			t.Errorf("source gave %v, a load %v", r.ServicePorts[i], want.ServicePorts[i])
		}
	}
}

func portsOf(r *Result, id string) any {
	for _, p := range r.ServicePorts {
		if p.GetServicePort().GetKey().ID() == id {
			return p
		}
	}
	return nil
}
