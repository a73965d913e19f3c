package filesource

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/test/modeltest"
	"github.com/kproxy/kproxy/watcher"
)

// writeFile writes content (leading newline trimmed) into dir and returns
// its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.TrimPrefix(content, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// multiDoc has three good documents, an ignored kind and three malformed
// services (documents 3, 4 and 5).
const multiDoc = `
# document 1
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.0.0.10
  ports:
  - name: http
    port: 80
    targetPort: http
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec: {}
---
apiVersion: v1
kind: Service
metadata:
  name: typo
  namespace: prod
spec:
  clusterIP: 10.0.0.11
  ports:
  - port: 80
    prot: TCP
---
apiVersion: v1
kind: Service
metadata:
  name: bigport
spec:
  clusterIP: 10.0.0.12
  ports:
  - port: 70000
---
apiVersion: v1
kind: Service
metadata:
  name: icmp
spec:
  clusterIP: 10.0.0.13
  ports:
  - port: 7
    protocol: ICMP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
endpoints:
- addresses: [10.1.0.1]
  nodeName: node-a
---
apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: 10.0.0.14
  ports:
  - port: 5432
`

func TestLoadPathMultiDocument(t *testing.T) {
	path := writeFile(t, t.TempDir(), "services.yaml", multiDoc)
	res, err := LoadPath(path, watcher.Options{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}

	if got, want := modeltest.KeyIDs(res.ServicePorts), []string{"default/db:/TCP", "default/web:http/TCP"}; !slices.Equal(got, want) {
		t.Fatalf("service ports = %v, want %v", got, want)
	}
	web := res.ServicePorts[1]
	if desc := modeltest.DescribeEndpoints(web.GetEndpoints()); !slices.Equal(desc, []string{"10.1.0.1:8080[ready,serving,local,internal,external]"}) {
		t.Fatalf("web endpoints = %q", desc)
	}

	wantErrors := []string{
		path + ` document 3 (Service prod/typo): strict decoding error: unknown field "spec.ports[0].prot"`,
		path + ` document 4 (Service default/bigport): spec.ports[0].port: 70000 is not in 1-65535`,
		path + ` document 5 (Service default/icmp): spec.ports[0].protocol: unsupported value "ICMP"`,
	}
	assertErrors(t, res.Errors, wantErrors)
	// The rejected services keep whatever state they had before.
	if want := []string{"default/bigport", "default/icmp", "prod/typo"}; !slices.Equal(res.Retain, want) || res.RetainMissing {
		t.Fatalf("retain = %v (missing %v), want %v", res.Retain, res.RetainMissing, want)
	}

	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], "document 2 (Deployment default/web): apps/v1 Deployment is not used") {
		t.Fatalf("skipped = %q, want the Deployment noted", res.Skipped)
	}
}

// assertErrors checks that errs match want one to one, each error starting
// with the wanted text.
func assertErrors(t *testing.T, errs []error, want []string) {
	t.Helper()
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, err := range errs {
		if !strings.HasPrefix(err.Error(), want[i]) {
			t.Errorf("error %d:\n got %q\nwant prefix %q", i, err, want[i])
		}
	}
}

func TestLoadPathDocumentErrors(t *testing.T) {
	const good = `
apiVersion: v1
kind: Service
metadata: {name: good}
spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}
`
	tests := []struct {
		name        string
		bad         string
		wantErr     string // the bad document is document 2
		wantRetain  []string
		wantMissing bool // the failure could not be tied to a service
	}{
		{name: "yaml syntax", bad: "apiVersion: v1\nkind: Service\n  metadata: x: y\n",
			wantErr: "document 2: not a Kubernetes object", wantMissing: true},
		{name: "missing kind", bad: "apiVersion: v1\nmetadata: {name: x}\n",
			wantErr: "document 2: apiVersion and kind are required", wantMissing: true},
		{name: "bad document separator", bad: "--- !tag\n",
			wantErr: "document 2: invalid Yaml document separator", wantMissing: true},
		{name: "wrong field type", bad: "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: eighty}]}\n",
			wantErr: "document 2 (Service default/x): ", wantRetain: []string{"default/x"}},
		{name: "duplicate field", bad: "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: prod}\nspec: {clusterIP: 10.0.0.2, clusterIP: 10.0.0.3}\n",
			wantErr: "document 2 (Service prod/x): ", wantRetain: []string{"prod/x"}},
		{name: "service without a name", bad: "apiVersion: v1\nkind: Service\nspec: {clusterIP: 10.0.0.2, ports: [{port: 80}]}\n",
			wantErr: "document 2 (Service): metadata.name: required", wantMissing: true},
		{name: "slice with unknown field", bad: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: good-1, labels: {kubernetes.io/service-name: good}}\naddressType: IPv4\nendpoint: []\n",
			wantErr: `document 2 (EndpointSlice default/good-1): strict decoding error: unknown field "endpoint"`, wantRetain: []string{"default/good"}},
		{name: "bad slice address", bad: `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: good-1, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
ports: [{port: 80}]
endpoints: [{addresses: ["fd00::1"]}]
`, wantErr: `document 2 (EndpointSlice default/good-1): endpoints[0].addresses[0]: "fd00::1" does not match addressType IPv4`,
			wantRetain: []string{"default/good"}},
		{name: "bad slice port", bad: `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: good-1, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
ports: [{port: 0}]
endpoints: []
`, wantErr: `document 2 (EndpointSlice default/good-1): ports[0].port: 0 is not in 1-65535`,
			wantRetain: []string{"default/good"}},
		{name: "duplicate service", bad: good,
			wantErr: "document 2 (Service default/good): duplicate of ", wantRetain: []string{"default/good"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "in.yaml", good+"---\n"+strings.TrimPrefix(tt.bad, "\n"))
			res, err := LoadPath(path, watcher.Options{})
			if err != nil {
				t.Fatal(err)
			}
			assertErrors(t, res.Errors, []string{path + " " + tt.wantErr})
			if !slices.Equal(res.Retain, tt.wantRetain) || res.RetainMissing != tt.wantMissing {
				t.Errorf("retain = %v (missing %v), want %v (missing %v)", res.Retain, res.RetainMissing, tt.wantRetain, tt.wantMissing)
			}
			if got := modeltest.KeyIDs(res.ServicePorts); !slices.Equal(got, []string{"default/good:/TCP"}) {
				t.Fatalf("service ports = %v, want the good service", got)
			}
		})
	}
}

func TestLoadPathDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a-service.yaml", `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.0.0.1
  ports: [{name: http, port: 80}]
`)
	// The slice lives in another file, and in JSON.
	writeFile(t, dir, "b-slice.json", `{
  "apiVersion": "discovery.k8s.io/v1",
  "kind": "EndpointSlice",
  "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
  "addressType": "IPv4",
  "ports": [{"name": "http", "port": 8080}],
  "endpoints": [{"addresses": ["10.1.0.1"]}]
}`)
	writeFile(t, dir, "c-more.YML", `
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.0.0.2
  ports: [{port: 443}]
---
`)
	// Not read: other extensions, hidden files, subdirectories.
	writeFile(t, dir, "notes.txt", "not yaml: [")
	writeFile(t, dir, ".editor-swap.yaml", "not yaml: [")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub.yaml"), "nested.yaml", "not yaml: [")

	res, err := LoadPath(dir, watcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("unexpected errors: %v", res.Errors)
	}
	if got, want := modeltest.KeyIDs(res.ServicePorts), []string{"shop/api:/TCP", "shop/web:http/TCP"}; !slices.Equal(got, want) {
		t.Fatalf("service ports = %v, want %v", got, want)
	}
	if desc := modeltest.DescribeEndpoints(res.ServicePorts[1].GetEndpoints()); !slices.Equal(desc, []string{"10.1.0.1:8080[ready,serving,internal,external]"}) {
		t.Fatalf("web endpoints = %q", desc)
	}
}

func TestLoadPathList(t *testing.T) {
	path := writeFile(t, t.TempDir(), "list.yaml", `
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}
- apiVersion: v1
  kind: Service
  metadata: {name: broken}
  spec: {clusterIP: 10.0.0.2, ports: [{port: 80, bogus: 1}]}
`)
	res, err := LoadPath(path, watcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertErrors(t, res.Errors, []string{path + ` document 1 item 2 (Service default/broken): strict decoding error: unknown field "spec.ports[0].bogus"`})
	if got := modeltest.KeyIDs(res.ServicePorts); !slices.Equal(got, []string{"default/web:/TCP"}) {
		t.Fatalf("service ports = %v", got)
	}
}

func TestLoadPathSkipped(t *testing.T) {
	path := writeFile(t, t.TempDir(), "in.yaml", `
apiVersion: v1
kind: Service
metadata: {name: dns}
spec: {clusterIP: None, ports: [{port: 53}]}
---
apiVersion: v1
kind: Service
metadata: {name: ext}
spec: {type: ExternalName, externalName: example.com}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: orphan-1, labels: {kubernetes.io/service-name: orphan}}
addressType: IPv4
endpoints: []
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: unlabelled}
addressType: IPv4
endpoints: []
`)
	res, err := LoadPath(path, watcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 || len(res.ServicePorts) > 0 || len(res.Retain) > 0 || res.RetainMissing {
		t.Fatalf("want only skips (deliberate, nothing to retain), got %+v", res)
	}
	want := []string{ // in file order
		"document 1 (Service default/dns): headless",
		"document 2 (Service default/ext): type ExternalName",
		"document 3 (EndpointSlice default/orphan-1): no Service default/orphan was loaded",
		"document 4 (EndpointSlice default/unlabelled): no kubernetes.io/service-name label",
	}
	if len(res.Skipped) != len(want) {
		t.Fatalf("skipped = %q, want %d entries", res.Skipped, len(want))
	}
	for i, w := range want {
		if !strings.Contains(res.Skipped[i], w) {
			t.Errorf("skipped[%d] = %q, want it to contain %q", i, res.Skipped[i], w)
		}
	}
}

func TestLoadPathEmpty(t *testing.T) {
	path := writeFile(t, t.TempDir(), "empty.yaml", "# nothing yet\n---\n---\n")
	res, err := LoadPath(path, watcher.Options{})
	if err != nil || len(res.ServicePorts)+len(res.Errors)+len(res.Skipped) != 0 {
		t.Fatalf("LoadPath = %+v, %v; want an empty result", res, err)
	}
}

func TestLoadPathMissing(t *testing.T) {
	_, err := LoadPath(filepath.Join(t.TempDir(), "nope.yaml"), watcher.Options{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want a not-exist error", err)
	}
}

// A file whose service has a bad source range loads the service with the
// others, and reports the bad entry.
func TestFileSourceIgnoresInvalidSourceRange(t *testing.T) {
	doc := `apiVersion: v1
kind: Service
metadata: {name: fw, namespace: ns}
spec:
  type: LoadBalancer
  clusterIP: 198.18.0.42
  loadBalancerSourceRanges: [192.0.2.3/32, 192.0.2.300/32]
  ports: [{port: 80}]
status: {loadBalancer: {ingress: [{ip: 198.18.2.42}]}}
`
	res := decodeInputs([]input{{name: "fw.yaml", data: []byte(doc)}}).result(watcher.Options{NodeName: "node"})
	if len(res.Errors) != 0 || len(res.ServicePorts) != 1 {
		t.Fatalf("errors %v, %d service ports; want the service loaded", res.Errors, len(res.ServicePorts))
	}
	if got := res.ServicePorts[0].GetServicePort().GetLoadBalancerSourceRanges(); !slices.Equal(got, []string{"192.0.2.3/32"}) {
		t.Errorf("source ranges %v, want [192.0.2.3/32]", got)
	}
	if len(res.InvalidCIDRs) != 1 || !strings.Contains(res.InvalidCIDRs[0].Error(), "192.0.2.300/32") {
		t.Errorf("InvalidCIDRs %v, want the bad entry named", res.InvalidCIDRs)
	}
}
