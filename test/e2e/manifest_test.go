//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// Service addresses of the e2e manifest (documentation and benchmarking
// ranges only).
const (
	webCluster4  = "198.18.0.10"
	webExternal4 = "198.18.1.10"
	webLB4       = "198.18.2.10"
	webCluster6  = "2001:db8:5::10"
	webExternal6 = "2001:db8:5::1:10"
	webLB6       = "2001:db8:5::2:10"
	empty4       = "198.18.0.20"
	empty6       = "2001:db8:5::20"
	gone4        = "198.18.0.30"

	webTCP, webUDP         = 80, 53       // e2e/web ports
	webNodeTCP, webNodeUDP = 30080, 30053 // e2e/web node ports
	emptyNodeTCP           = 30081        // e2e/empty node ports
	emptyNodeUDP           = 30054
	goneTCP, goneUDP       = 8080, 8053 // e2e/gone ports
	backendTCP             = 9000
	backendUDP             = 9053
)

// Service ports of the manifest, as the admin API names them.
const (
	spWebTCP   = "e2e/web:http/TCP"
	spWebUDP   = "e2e/web:dns/UDP"
	spEmptyTCP = "e2e/empty:http/TCP"
	spEmptyUDP = "e2e/empty:dns/UDP"
	spGoneTCP  = "e2e/gone:web/TCP"
	spGoneUDP  = "e2e/gone:dns/UDP"
)

func servicePorts(withGone bool) []string {
	sps := []string{spWebTCP, spWebUDP, spEmptyTCP, spEmptyUDP}
	if withGone {
		sps = append(sps, spGoneTCP, spGoneUDP)
	}
	return sps
}

// writeManifest writes the services (atomically: kproxy polls the file):
//
//	e2e/web    LoadBalancer, dual-stack: cluster, external and LB IPs,
//	           http 80/TCP (node port 30080) and dns 53/UDP (30053) -> the 4 backends
//	e2e/empty  NodePort, dual-stack, no endpoints: 80/TCP (30081), 53/UDP (30054)
//	e2e/gone   ClusterIP 198.18.0.30, 8080/TCP and 8053/UDP -> one backend (withGone only)
func (e *env) writeManifest(t *testing.T, withGone bool) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: web, namespace: e2e}
spec:
  type: LoadBalancer
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[1]s
  clusterIPs: ["%[1]s", "%[2]s"]
  externalIPs: ["%[3]s", "%[4]s"]
  ports:
  - {name: http, protocol: TCP, port: %[7]d, targetPort: %[9]d, nodePort: %[10]d}
  - {name: dns, protocol: UDP, port: %[8]d, targetPort: %[11]d, nodePort: %[12]d}
status:
  loadBalancer:
    ingress: [{ip: "%[5]s"}, {ip: "%[6]s"}]
`, webCluster4, webCluster6, webExternal4, webExternal6, webLB4, webLB6,
		webTCP, webUDP, backendTCP, webNodeTCP, backendUDP, webNodeUDP)
	for _, family := range []struct {
		name string
		ips  []netip.Addr
	}{{"IPv4", e.be.IPs4}, {"IPv6", e.be.IPs6}} {
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-%s
  namespace: e2e
  labels: {kubernetes.io/service-name: web}
addressType: %s
ports:
- {name: http, protocol: TCP, port: %d}
- {name: dns, protocol: UDP, port: %d}
endpoints:
`, strings.ToLower(family.name), family.name, backendTCP, backendUDP)
		for _, ip := range family.ips {
			fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}, nodeName: backend}\n", ip)
		}
	}
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: e2e}
spec:
  type: NodePort
  ipFamilyPolicy: PreferDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[1]s
  clusterIPs: ["%[1]s", "%[2]s"]
  ports:
  - {name: http, protocol: TCP, port: %[3]d, targetPort: %[4]d, nodePort: %[5]d}
  - {name: dns, protocol: UDP, port: %[6]d, targetPort: %[7]d, nodePort: %[8]d}
`, empty4, empty6, webTCP, backendTCP, emptyNodeTCP, webUDP, backendUDP, emptyNodeUDP)
	if withGone {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: gone, namespace: e2e}
spec:
  clusterIP: %[1]s
  ports:
  - {name: web, protocol: TCP, port: %[2]d, targetPort: %[4]d}
  - {name: dns, protocol: UDP, port: %[3]d, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: gone-1
  namespace: e2e
  labels: {kubernetes.io/service-name: gone}
addressType: IPv4
ports:
- {name: web, protocol: TCP, port: %[4]d}
- {name: dns, protocol: UDP, port: %[5]d}
endpoints:
- {addresses: ["%[6]s"], conditions: {ready: true}}
`, gone4, goneTCP, goneUDP, backendTCP, backendUDP, e.be.IPs4[0])
	}
	e.replaceManifest(t, b.String())
}

// replaceManifest writes the manifest atomically (kproxy watches the file).
func (e *env) replaceManifest(t *testing.T, doc string) {
	t.Helper()
	tmp := e.manifest + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.manifest); err != nil {
		t.Fatal(err)
	}
}
