//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

const (
	stickyCluster4 = "198.18.0.60"
	stickyNodePort = 30095
	spSticky       = "e2e/sticky:http/TCP"
)

// testAffinityPerScope: ClientIP affinity is kept per traffic scope. A
// client pinned through the cluster IP to an endpoint on another node is
// not sent there through the node port, which externalTrafficPolicy Local
// limits to this node's endpoints; through the cluster IP it stays pinned.
func testAffinityPerScope(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	local, remote := e.be.IPs4[0], e.be.IPs4[1]
	// First the local endpoint is not ready: cluster traffic can only pin
	// the client to the remote one.
	e.writeStickyManifest(t, false)
	p := e.start(t)
	e.waitState(t, p, spSticky+" with its remote endpoint", func(st map[string]spState) bool {
		s, ok := st[spSticky]
		return ok && len(s.Endpoints) == 1 && len(s.ListenAddresses) > 0
	})
	e.waitRules(t, []string{stickyCluster4}, nil)
	cluster := svcAddr(stickyCluster4, 80)
	nodePort := netip.AddrPortFrom(netnstest.NodeIP4, stickyNodePort)
	if got, err := e.askBackend(e.tp.Client, "tcp", cluster, 2*time.Second); err != nil || got != remote.String() {
		t.Fatalf("cluster IP: %q %v, want the remote endpoint %s", got, err, remote)
	}

	e.writeStickyManifest(t, true)
	e.waitState(t, p, spSticky+" with both endpoints", func(st map[string]spState) bool {
		return len(st[spSticky].Endpoints) == 2
	})
	// The state changes before the rules transaction that stops rejecting
	// external traffic (a local endpoint is ready now) is in.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := e.askBackend(e.tp.Client, "tcp", nodePort, 2*time.Second); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the kernel's rules through a connection: no event to await
	}
	for range 5 {
		if got, err := e.askBackend(e.tp.Client, "tcp", nodePort, 2*time.Second); err != nil || got != local.String() {
			t.Fatalf("node port (externalTrafficPolicy Local): %q %v, want only the local endpoint %s", got, err, local)
		}
		if got, err := e.askBackend(e.tp.Client, "tcp", cluster, 2*time.Second); err != nil || got != remote.String() {
			t.Fatalf("cluster IP: %q %v, want the pinned remote endpoint %s", got, err, remote)
		}
	}
}

// writeStickyManifest writes e2e/sticky: ClientIP affinity,
// externalTrafficPolicy Local, node port 30095; its endpoints are the
// first backend address on this node (ready or not) and the second on
// another node.
func (e *env) writeStickyManifest(t *testing.T, localReady bool) {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: e2e}
spec:
  type: NodePort
  clusterIP: %s
  externalTrafficPolicy: Local
  sessionAffinity: ClientIP
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: %d, nodePort: %d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: sticky-1, namespace: e2e, labels: {kubernetes.io/service-name: sticky}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %d}]
endpoints:
- {addresses: ["%s"], conditions: {ready: %v}, nodeName: node}
- {addresses: ["%s"], conditions: {ready: true}, nodeName: elsewhere}
`, stickyCluster4, backendTCP, stickyNodePort, backendTCP, e.be.IPs4[0], localReady, e.be.IPs4[1])
	e.replaceManifest(t, doc)
}
