package filesource

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kproxy/kproxy/watcher"
)

// FuzzManifests feeds arbitrary bytes to the file source's decoder and
// node-local view: it must never panic, and whatever it accepts must be a
// service port kproxy can serve. Seeds: the repository's manifests
// (testdata/fuzz holds what the fuzzer found worth keeping).
func FuzzManifests(f *testing.F) {
	for _, glob := range []string{"../../examples/*.yaml", "../../examples/*/*.yaml", "../../cmd/kproxy/testdata/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Service, metadata: {name: a}, spec: {ports: [{port: 1}]}}]\n"))
	// (alias seeds: see testdata/fuzz)
	f.Fuzz(func(t *testing.T, data []byte) {
		res := buildResult([]input{{name: "fuzz.yaml", data: data}}, watcher.Options{NodeName: "node", ServiceProxyName: ""})
		for _, spe := range res.ServicePorts {
			sp := spe.GetServicePort()
			if sp.GetKey().GetName() == "" || sp.GetPort() < 1 || sp.GetPort() > 65535 {
				t.Fatalf("accepted an unservable service port: %v", sp)
			}
			for _, e := range spe.GetEndpoints() {
				if len(e.GetIps()) == 0 || e.GetPort() < 1 || e.GetPort() > 65535 {
					t.Fatalf("accepted an unusable endpoint %v of %s", e, sp.GetKey().ID())
				}
			}
		}
	})
}

func TestManifestSizeCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	big := make([]byte, MaxManifestBytes+1)
	for i := range big {
		big[i] = '#'
	}
	if err := os.WriteFile(path, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPath(path, watcher.Options{}); err == nil {
		t.Fatal("a manifest over the cap was read")
	} else {
		t.Logf("as wanted: %v", err)
	}
}
