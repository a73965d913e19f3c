//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

const (
	healthzAddress = "127.0.0.1:10256" // on the node's own loopback
	localSvcHCPort = 32100
	spLocal        = "e2e/local:http/TCP"
)

// testHealth: kube-proxy's health contract, on the real binary.
// /healthz and /livez answer 200 with kube-proxy's fields; when the kernel
// rules backend fails (fault injection) queued changes stay unapplied and
// both turn 503 after twice the sync period, and 200 again once it
// recovers. A health-check node port answers 200 with the local endpoint
// count while this node has local endpoints, 503 once they are remote,
// and closes when the service goes.
func testHealth(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.writeLocalManifest(t, "node")
	p := e.start(t, "--sync-period", "1s", "--healthz-bind-address", healthzAddress)
	e.waitState(t, p, spLocal+" ready", func(st map[string]spState) bool {
		s, ok := st[spLocal]
		return ok && len(s.Endpoints) == 2 && len(s.ListenAddresses) > 0
	})

	e.waitHealth(t, "/healthz", 200, func(b map[string]any) error {
		for _, f := range []string{"lastUpdated", "currentTime", "nodeEligible"} {
			if _, ok := b[f]; !ok {
				return fmt.Errorf("no %q in %v", f, b)
			}
		}
		return nil
	})
	e.waitHealth(t, "/livez", 200, nil)

	t.Run("RulesFault", func(t *testing.T) {
		e.admin(t, "/rules-fault", map[string]string{"duration": "5s"})
		start := time.Now()
		e.waitHealth(t, "/healthz", 503, nil)
		e.waitHealth(t, "/livez", 503, nil)
		t.Logf("unhealthy %v after the fault", time.Since(start).Round(time.Millisecond))
		e.waitHealth(t, "/healthz", 200, nil)
		t.Logf("healthy again %v after the fault (it lasted 5s)", time.Since(start).Round(time.Millisecond))
	})

	t.Run("HealthCheckNodePort", func(t *testing.T) {
		e.waitHCNodePort(t, 200, 2)
		e.writeLocalManifest(t, "elsewhere")
		e.waitHCNodePort(t, 503, 0)
		e.writeDNSManifest(t, true) // e2e/local is gone
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, _, err := e.getJSON(fmt.Sprintf("http://127.0.0.1:%d/", localSvcHCPort))
			if err != nil {
				break // closed
			}
			if time.Now().After(deadline) {
				t.Fatal("the health-check node port still answers after its service went")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// getJSON GETs u from inside the node and decodes its JSON body.
func (e *env) getJSON(u string) (int, map[string]any, error) {
	resp, err := e.tp.Node.HTTPClient(2 * time.Second).Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("body %q: %w", raw, err)
	}
	return resp.StatusCode, body, nil
}

// waitHealth polls path on the health server (every 100 ms, at most 15 s)
// until it answers code and check (if any) accepts the body.
func (e *env) waitHealth(t *testing.T, path string, code int, check func(map[string]any) error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, body, err := e.getJSON("http://" + healthzAddress + path)
		if err == nil && got == code && check != nil {
			err = check(body)
		}
		if err == nil && got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %v (%v), want %d within 15s", path, got, body, err, code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHCNodePort polls the health-check node port until it answers code
// with local endpoints, in kube-proxy's body.
func (e *env) waitHCNodePort(t *testing.T, code, local int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, body, err := e.getJSON(fmt.Sprintf("http://127.0.0.1:%d/", localSvcHCPort))
		svc, _ := body["service"].(map[string]any)
		if err == nil && got == code && body["localEndpoints"] == float64(local) &&
			svc["namespace"] == "e2e" && svc["name"] == "local" && body["serviceProxyHealthy"] == true {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health-check node port: %d %v (%v), want %d with localEndpoints %d", got, body, err, code, local)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// admin POSTs to the admin API inside the node.
func (e *env) admin(t *testing.T, path string, body any) {
	t.Helper()
	req, err := e.adminRequest("POST", path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.tp.Node.HTTPClient(2 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s: %s", path, resp.Status, body)
	}
}

// writeLocalManifest writes e2e/local: a LoadBalancer service with
// externalTrafficPolicy Local and health-check node port 32100, whose two
// IPv4 endpoints run on node (this kproxy's --node-name is "node").
func (e *env) writeLocalManifest(t *testing.T, node string) {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: local, namespace: e2e}
spec:
  type: LoadBalancer
  clusterIP: 198.18.0.50
  externalTrafficPolicy: Local
  healthCheckNodePort: %d
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: %d, nodePort: 30090}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: local-1
  namespace: e2e
  labels: {kubernetes.io/service-name: local}
addressType: IPv4
ports:
- {name: http, protocol: TCP, port: %d}
endpoints:
- {addresses: ["%s"], conditions: {ready: true}, nodeName: %s}
- {addresses: ["%s"], conditions: {ready: true}, nodeName: %s}
`, localSvcHCPort, backendTCP, backendTCP, e.be.IPs4[0], node, e.be.IPs4[1], node)
	e.replaceManifest(t, doc)
}
