package filesource

import (
	"reflect"
	"testing"
)

// decodeKnown decodes a Service or EndpointSlice as the deserializer does:
// the same object, or an error for the same documents.
func TestDecodeKnownAsDeserializer(t *testing.T) {
	for name, c := range map[string]struct {
		doc string
		t   typeOf
	}{
		"service": {`apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  clusterIP: 198.18.0.10
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: TCP
  sessionAffinity: ClientIP
`, typeOf{"v1", "Service"}},
		"endpointslice": {`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
endpoints:
- addresses: [192.0.2.1]
  conditions:
    ready: true
ports:
- name: http
  port: 8080
`, typeOf{"discovery.k8s.io/v1", "EndpointSlice"}},
		"unknown field": {`apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  targetport: 80
`, typeOf{"v1", "Service"}},
		"field in another case": {`apiVersion: v1
kind: Service
metadata:
  name: web
Spec:
  clusterIP: 198.18.0.10
`, typeOf{"v1", "Service"}},
		"wrong type": {`apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports: many
`, typeOf{"v1", "Service"}},
		"duplicate field":          {`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","name":"b"}}`, typeOf{"v1", "Service"}},
		"kind in another case too": {`{"apiVersion":"v1","kind":"Service","Kind":"EndpointSlice","metadata":{"name":"a"}}`, typeOf{"v1", "Service"}},
	} {
		t.Run(name, func(t *testing.T) {
			js, ok := []byte(c.doc), true
			if c.doc[0] != '{' {
				var got typeOf
				if js, got, ok = simpleYAMLDocument([]byte(c.doc)); !ok || got != c.t {
					t.Fatalf("simpleYAMLDocument: ok %v, type %+v, want %+v", ok, got, c.t)
				}
			}
			obj, known, err := decodeKnown(js, c.t)
			if !known {
				t.Fatal("not decoded as a known kind")
			}
			want, _, wantErr := deserializer.Decode(js, nil, nil)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("error %v, the deserializer's %v", err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(obj, want) {
				t.Fatalf("decoded\n%#v\nthe deserializer\n%#v", obj, want)
			}
		})
	}
}

// Only plain apiVersion and kind scalars are read; the rest (quoted, a
// List, another kind) is the deserializer's.
func TestSimpleYAMLDocumentType(t *testing.T) {
	for doc, want := range map[string]typeOf{
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n":               {"v1", "Service"},
		"kind: Service\napiVersion: v1\n":                                     {"v1", "Service"},
		"apiVersion: 'v1'\nkind: \"Service\"\n":                               {},
		"apiVersion: v1\nkind: List\nitems: []\n":                             {"v1", "List"},
		"metadata:\n  kind: Service\n  apiVersion: v1\nkind: EndpointSlice\n": {"", "EndpointSlice"},
	} {
		_, got, ok := simpleYAMLDocument([]byte(doc))
		if !ok || got != want {
			t.Errorf("%q: %+v (ok %v), want %+v", doc, got, ok, want)
		}
		if _, known, _ := decodeKnown([]byte("{}"), got); known && got != (typeOf{"v1", "Service"}) {
			t.Errorf("%q: %+v decoded as known", doc, got)
		}
	}
}
