package filesource

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/watcher"
)

// Many services are built on several goroutines, and the Result is the
// one built in place, findings and all, in the same order.
func TestBuildManyServicesAsOne(t *testing.T) {
	var b strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata:
  name: s%d
  namespace: ns%d
  annotations:
    kproxy.io/proxy-protocol: "%s"
spec:
  clusterIP: 198.18.%d.%d
  loadBalancerSourceRanges: [%s]
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: %s
`, i, i%7, map[bool]string{true: "v9", false: "v1"}[i%11 == 0], i/250, i%250+1,
			map[bool]string{true: "not-a-cidr", false: "192.0.2.0/24"}[i%13 == 0],
			map[bool]string{true: "SCTPX", false: "TCP"}[i%17 == 0])
		if i%5 != 0 {
			fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: s%d-1
  namespace: ns%d
  labels:
    kubernetes.io/service-name: s%d
addressType: IPv4
endpoints:
- addresses: [192.0.2.%d]
  conditions:
    ready: true
  nodeName: node%d
ports:
- name: http
  port: 8080
`, i, i%7, i, i%250+1, i%3)
		}
	}
	path := writeFile(t, t.TempDir(), "many.yaml", b.String())
	opts := watcher.Options{NodeName: "node1"}
	parallel, err := LoadPath(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	was := buildPerWorker
	buildPerWorker = 1 << 30
	defer func() { buildPerWorker = was }()
	inPlace, err := LoadPath(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(inPlace.ServicePorts) < 1000 || len(inPlace.Errors) == 0 || len(inPlace.InvalidCIDRs) == 0 || len(inPlace.AnnotationErrors) == 0 {
		t.Fatalf("the manifest tests too little: %d ports, %d errors, %d CIDRs, %d annotations",
			len(inPlace.ServicePorts), len(inPlace.Errors), len(inPlace.InvalidCIDRs), len(inPlace.AnnotationErrors))
	}
	if len(parallel.ServicePorts) != len(inPlace.ServicePorts) {
		t.Fatalf("%d service ports, %d built in place", len(parallel.ServicePorts), len(inPlace.ServicePorts))
	}
	for i := range parallel.ServicePorts {
		if !proto.Equal(parallel.ServicePorts[i], inPlace.ServicePorts[i]) {
			t.Fatalf("service port %d: %v, built in place %v", i, parallel.ServicePorts[i], inPlace.ServicePorts[i])
		}
	}
	texts := func(errs []error) []string {
		var out []string
		for _, e := range errs {
			out = append(out, e.Error())
		}
		return out
	}
	for name, pair := range map[string][2][]error{
		"errors": {parallel.Errors, inPlace.Errors}, "CIDRs": {parallel.InvalidCIDRs, inPlace.InvalidCIDRs},
		"annotations": {parallel.AnnotationErrors, inPlace.AnnotationErrors},
	} {
		if !reflect.DeepEqual(texts(pair[0]), texts(pair[1])) {
			t.Errorf("%s: %q, built in place %q", name, texts(pair[0]), texts(pair[1]))
		}
	}
	if !reflect.DeepEqual(parallel.Skipped, inPlace.Skipped) || !reflect.DeepEqual(parallel.Retain, inPlace.Retain) {
		t.Errorf("skipped %q retain %q, built in place %q %q", parallel.Skipped, parallel.Retain, inPlace.Skipped, inPlace.Retain)
	}
}
