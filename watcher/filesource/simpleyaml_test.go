package filesource

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// simpleYAMLSeeds are documents of the subset and just outside it.
var simpleYAMLSeeds = []string{
	// As kproxy-bench writes them.
	"apiVersion: v1\nkind: Service\nmetadata: {name: svc-01000, namespace: bench}\nspec:\n  clusterIP: 127.2.3.233\n  ports:\n  - {name: tcp, protocol: TCP, port: 8080, targetPort: 42915}\n",
	"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: svc-01000, namespace: bench, labels: {kubernetes.io/service-name: svc-01000}}\naddressType: IPv4\nports:\n- {name: tcp, protocol: TCP, port: 42915}\nendpoints:\n- {addresses: [\"127.1.0.1\"], conditions: {ready: true}}\n",
	// Block style, as kubectl writes them.
	"apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  selector:\n    app: web\n  ports:\n    - name: http\n      port: 80\n      targetPort: 8080\n    - name: https\n      port: 443\n  sessionAffinity: ClientIP\n",
	"a:\n  - b: 1\n    c: [x, 'y z', \"q\"]\n  - d\n  - 'e'\nf: {}\ng: []\nh:\ni: -3\n",
	// Outside: each must take the parser.
	"a: yes\n", "a: 0123\n", "a: 1.5\n", "a: ~\n", "a: 'it''s'\n", "a: \"x\\ty\"\n", "a: b # c\n",
	"a: &x 1\nb: *x\n", "a: !!str 1\n", "a: |\n  x\n", "a: b\na: c\n", "a: b\n  c\n", "- a\n", "a:\tb\n",
	"a: {b: 1, }\n", "a: [1, 2\n", "a: 2001:db8::1\n", "on: 1\n", "a: 1e3\n", "a: 2001-12-14\n", "a: .inf\n",
	"a: [b: c]\n", "a:\n- - b\n", "\"a\": b\n",
}

// FuzzSimpleYAML checks that whatever simpleYAMLToJSON accepts, it
// converts to the same JSON value as sigs.k8s.io/yaml's YAMLToJSONStrict.
func FuzzSimpleYAML(f *testing.F) {
	for _, s := range simpleYAMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		checkSimpleYAML(t, doc)
	})
}

// checkSimpleYAML compares the two conversions of doc, when the simple one
// accepts it, and reports whether it did.
func checkSimpleYAML(t *testing.T, doc []byte) bool {
	t.Helper()
	got, ok := simpleYAMLToJSON(doc)
	if !ok {
		return false
	}
	want, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		t.Fatalf("accepted what the YAML parser refuses (%v):\n%s", err, doc)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("invalid JSON %s from:\n%s", got, doc)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("converted\n%s\nto %s, the YAML parser to %s", doc, got, want)
	}
	return true
}

// TestSimpleYAMLMatchesParser runs the comparison over the seeds and every
// document of the repository's manifests, and checks that the documents
// kproxy-bench writes take the simple path.
func TestSimpleYAMLMatchesParser(t *testing.T) {
	for i, s := range simpleYAMLSeeds {
		accepted := checkSimpleYAML(t, []byte(s))
		if want := i < 4; accepted != want {
			t.Errorf("seed %d accepted %v, want %v:\n%s", i, accepted, want, s)
		}
	}
	var files []string
	for _, glob := range []string{"../../examples/*.yaml", "../../examples/*/*.yaml", "../../cmd/kproxy/testdata/*.yaml", "../../deploy/*.yaml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	docs, accepted := 0, 0
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				break
			}
			docs++
			if checkSimpleYAML(t, doc) {
				accepted++
			}
		}
	}
	t.Logf("%d of %d documents of the repository's manifests took the simple path", accepted, docs)
}

// TestSimpleYAMLLongKeys: YAML refuses an implicit key longer than 1024
// characters, so the simple path must hand such keys to the parser.
func TestSimpleYAMLLongKeys(t *testing.T) {
	for _, n := range []int{maxPlainKey, maxPlainKey + 1, 1024, 1025, 2099} {
		k := strings.Repeat("r", n-1) + "A"
		for _, doc := range []string{k + ":\n", k + ": v\n", "a: {" + k + ": v}\n", "- " + k + ": v\n"} {
			accepted := checkSimpleYAML(t, []byte(doc))
			if want := n <= maxPlainKey && doc[0] != '-'; accepted != want {
				t.Errorf("a %d-byte key in %.12q...: accepted %v, want %v", n, doc, accepted, want)
			}
		}
	}
}
