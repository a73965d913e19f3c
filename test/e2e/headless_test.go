//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

const (
	kpngExternal4 = "198.18.3.55"
	kpngExternal6 = "2001:db8:5::3:55"
	kpngPort      = 6000
)

// testHeadlessNamedProxier: KPNG's specialized-proxier example. A headless
// service labelled for the proxier "kpng-example" is served by
// `kproxy run --service-proxy-name kpng-example` through its external IPs
// (no cluster IP is invented); without the flag it is skipped, as
// kube-proxy skips it.
func testHeadlessNamedProxier(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.writeKPNGExample(t)
	p := e.start(t, "--service-proxy-name", "kpng-example")
	e.waitState(t, p, "kpng-example ready", func(st map[string]spState) bool {
		s, ok := st["default/kpng-example:/TCP"]
		return ok && len(s.Endpoints) == 4 && len(s.ListenAddresses) > 0
	})
	e.waitRules(t, []string{kpngExternal4, kpngExternal6}, nil)
	e.expectBackend(t, e.tp.Client, "tcp", svcAddr(kpngExternal4, kpngPort))
	e.expectBackend(t, e.tp.Client, "tcp", svcAddr(kpngExternal6, kpngPort))
	if rules := e.rules(t); strings.Contains(rules, "None") {
		t.Errorf("rules mention a cluster IP \"None\":\n%s", rules)
	}

	p.stop(t, syscall.SIGTERM)
	p2 := e.start(t)
	e.waitState(t, p2, "no service ports", func(st map[string]spState) bool { return len(st) == 0 })
	e.expectNoBackend(t, e.tp.Client, "tcp", svcAddr(kpngExternal4, kpngPort))
}

// writeKPNGExample writes KPNG's example with this topology's addresses:
// external IPs in the benchmarking ranges, the backends as its endpoints
// on this node.
func (e *env) writeKPNGExample(t *testing.T) {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: kpng-example
  namespace: default
  labels: {service.kubernetes.io/service-proxy-name: kpng-example}
spec:
  clusterIP: None
  ipFamilyPolicy: RequireDualStack
  externalIPs: [%s, "%s"]
  ports: [{port: %d, targetPort: %d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kpng-example-v4, namespace: default, labels: {kubernetes.io/service-name: kpng-example}}
addressType: IPv4
ports: [{port: %d}]
endpoints:
- {addresses: ["%s"], conditions: {ready: true}, nodeName: node}
- {addresses: ["%s"], conditions: {ready: true}, nodeName: node}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kpng-example-v6, namespace: default, labels: {kubernetes.io/service-name: kpng-example}}
addressType: IPv6
ports: [{port: %d}]
endpoints:
- {addresses: ["%s"], conditions: {ready: true}, nodeName: node}
- {addresses: ["%s"], conditions: {ready: true}, nodeName: node}
`, kpngExternal4, kpngExternal6, kpngPort, backendTCP, backendTCP, e.be.IPs4[0], e.be.IPs4[1], backendTCP, e.be.IPs6[0], e.be.IPs6[1])
	e.replaceManifest(t, doc)
}
