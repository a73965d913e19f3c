//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/netnstest"
)

// The accept-queue load: an endpoint with listen(2)'s backlog 5 (Python's
// http.server default) whose every 10th request takes 400 ms, longer than
// kproxy's first dial timeout (250 ms): behind the slow request its queue
// fills (Linux admits backlog+1) and the kernel drops the next SYNs, which
// the connecting side's kernel retransmits after 1 s. 8
// connection-per-request clients.
const (
	aqBacklog, aqPauseEvery, aqPause = 5, 10, 400 * time.Millisecond
	aqRequests, aqClients            = 200, 8
	aqLimit                          = 2 * time.Minute
	aqCluster4                       = "198.18.0.50"
	aqPort, aqBackendPort            = 80, 9100
)

// testAcceptQueue runs kproxy (nftables portal) in front of the only
// endpoint of e2e/queue, one with a 5-deep accept queue, and sends it the
// accept-queue load from the client to the cluster IP: no request may
// fail, as none does from the client straight to the endpoint (the
// control, first). A dropped SYN is a busy endpoint, not a dead one.
func testAcceptQueue(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	ep := netip.AddrPortFrom(e.be.IPs4[0], aqBackendPort)
	e.be.MustDo(t, func() error {
		b, err := backends.StartSlowAccept(ep.String(), aqBacklog, aqPauseEvery, aqPause)
		if err != nil {
			return err
		}
		t.Cleanup(b.Close)
		return nil
	})
	e.replaceManifest(t, queueManifest(ep))

	// The control: the client reaches the endpoint by plain routing
	// through the node (forwarding is on), no proxy on the way.
	e.tp.Client.MustRun(t, "ip", "route", "add", ep.Addr().String()+"/32", "via", netnstest.NodeIP4.String())
	e.be.MustRun(t, "ip", "route", "add", netnstest.ClientIP4.String()+"/32", "via", e.be.NodeIP4.String())
	start := time.Now()
	made, failed, first := backends.RequestsVia(context.Background(), e.tp.Client.DialContext, ep.String(), aqRequests, aqClients, aqLimit)
	t.Logf("direct: %d requests, %d failed, in %v", made, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 || made < aqRequests {
		t.Fatalf("direct: %d of %d requests failed (first: %v), %d made: the control itself loses requests", failed, aqRequests, first, made)
	}

	p := e.start(t, "--log-level", "debug")
	const sp = "e2e/queue:http/TCP"
	e.waitState(t, p, sp+" ready with its endpoint", func(st map[string]spState) bool {
		s, ok := st[sp]
		return ok && s.ProxyPort != 0 && len(s.ListenAddresses) > 0 && len(s.Endpoints) == 1
	})
	e.waitRules(t, []string{aqCluster4}, nil)

	svc := svcAddr(aqCluster4, aqPort).String()
	start = time.Now()
	made, failed, first = backends.RequestsVia(context.Background(), e.tp.Client.DialContext, svc, aqRequests, aqClients, aqLimit)
	t.Logf("through kproxy: %d requests, %d failed, in %v", made, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d requests to %s failed through kproxy (first: %v), none direct", failed, made, svc, first)
	}
	if made < aqRequests {
		t.Errorf("only %d of %d requests through kproxy within %v", made, aqRequests, aqLimit)
	}
	log, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	if timedOut := strings.Count(string(log), "dial endpoint failed"); timedOut == 0 {
		t.Error("kproxy logged no endpoint dial that failed: the accept queue never overflowed, so this proves nothing")
	} else {
		t.Logf("kproxy logged %d endpoint dials that failed", timedOut)
	}
}

// queueManifest is e2e/queue: cluster IP aqCluster4, http 80/TCP -> ep,
// its only endpoint.
func queueManifest(ep netip.AddrPort) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: queue, namespace: e2e}
spec:
  clusterIP: %[1]s
  ports:
  - {name: http, protocol: TCP, port: %[2]d, targetPort: %[3]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: queue-1
  namespace: e2e
  labels: {kubernetes.io/service-name: queue}
addressType: IPv4
ports:
- {name: http, protocol: TCP, port: %[3]d}
endpoints:
- {addresses: ["%[4]s"], conditions: {ready: true}}
`, aqCluster4, aqPort, ep.Port(), ep.Addr())
}
