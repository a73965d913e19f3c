//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// etpLocalToggle is TestOverallNFTablesRules' svc2 (externalTrafficPolicy
// Local, an LB IP and an external IP) whose only local endpoint comes and
// goes: with it, external traffic is served; without it, dropped.
const etpLocalToggle = `apiVersion: v1
kind: Service
metadata: {name: svc2, namespace: ns2}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  clusterIP: 198.18.0.42
  externalIPs: [203.0.113.222]
  healthCheckNodePort: 30000
  ports: [{name: p80, port: 80, protocol: TCP, nodePort: 3001}]
status:
  loadBalancer: {ingress: [{ip: 203.0.113.204}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc2-1, namespace: ns2, labels: {kubernetes.io/service-name: svc2}}
addressType: IPv4
ports: [{name: p80, port: 80, protocol: TCP}]
endpoints:
- {addresses: [198.51.100.12], nodeName: other-node}
`

const etpLocalEndpoint = "- {addresses: [198.51.100.31], nodeName: test-node}\n"

// TestLocalPolicyNeverLeaks: external traffic to an externalTrafficPolicy
// Local LB IP and external IP is served by the local endpoint or dropped on
// the node, never sent on by the node's default route, at any moment:
// while kproxy programs its first rules, and while the local endpoint
// comes and goes (served -> dropped -> served, 20 times), clients outside
// connect without pause, and upstream (where the default route leads)
// must never answer one of them. Each kernel mode.
func TestLocalPolicyNeverLeaks(t *testing.T) {
	inEachKernelMode(t, []string{"nft", "iptables-restore"}, testLocalPolicyNeverLeaks)
}

func testLocalPolicyNeverLeaks(t *testing.T, bin, mode string) {
	tp := newTopology(t, []int{80})
	startBackends(t, tp, &manifest{backends: []backend{
		{"tcp", netip.MustParseAddrPort("198.51.100.12:80")}, {"tcp", netip.MustParseAddrPort("198.51.100.31:80")}}})
	served := etpLocalToggle + etpLocalEndpoint
	in := startKproxy(t, bin, mode, tp, served, []string{"--cluster-cidr", clusterCIDRs, "--nodeport-addresses", nodePortAddresses})

	// Probers from outside, from the start: until kproxy's first rules,
	// nothing may be said (a node without rules forwards, as it would
	// without kproxy); from then on every answer must be an endpoint's.
	var leaks, answers, probes atomic.Int64
	var leaked sync.Map
	var programmed atomic.Bool
	var phase atomic.Int64 // toggles written so far
	stop := make(chan struct{})
	var wg sync.WaitGroup
	src := sourceIPs4[fromExternal]
	for _, to := range []string{"203.0.113.204:80", "203.0.113.222:80"} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dst := netip.MustParseAddrPort(to)
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := programmed.Load()
					o := probe(tp.out, "tcp", src, dst, 300*time.Millisecond)
					probes.Add(1)
					switch {
					case o.kind == "answer":
						answers.Add(1)
					case o.kind == "other" && after:
						leaks.Add(1)
						leaked.Store(fmt.Sprintf("%s %s (toggle %d)", to, o, phase.Load()), true)
					}
				}
			}()
		}
	}
	stopProbers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopProbers()

	m := &manifest{servicePorts: 1, clusterIPs: []netip.Addr{netip.MustParseAddr("198.18.0.42")}}
	if err := in.awaitReady(m, false); err != nil {
		t.Fatal(err)
	}
	programmed.Store(true)
	const toggles = 20
	for i := range toggles {
		text, wantLocal := etpLocalToggle, false
		if i%2 == 1 {
			text, wantLocal = served, true
		}
		in.writeManifest(t, text)
		phase.Store(int64(i + 1))
		in.awaitLocalEndpoint(t, wantLocal)
		time.Sleep(100 * time.Millisecond) // let the probers see this state too
	}
	stopProbers()
	t.Logf("%s: %d probes, %d answered by the local endpoint, %d by upstream", mode, probes.Load(), answers.Load(), leaks.Load())
	if answers.Load() == 0 {
		t.Errorf("%s: no probe was ever served: the test saw no served phase", mode)
	}
	if leaks.Load() > 0 {
		var seen []string
		leaked.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
		t.Errorf("%s: %d connections to the Local policy's external addresses left the node by its default route: %s", mode, leaks.Load(), strings.Join(seen, "; "))
	}
}

// awaitLocalEndpoint polls kproxy's state (every 20 ms, at most 10 s)
// until its one service port has the local endpoint, or has not.
func (in *instance) awaitLocalEndpoint(t *testing.T, local bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := in.state()
		if err == nil && len(st) == 1 {
			has := false
			for _, e := range st[0].Endpoints {
				has = has || strings.Contains(string(e), "198.51.100.31")
			}
			if has == local {
				return
			}
		}
		if err := in.exited(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("kproxy's state did not show the local endpoint %v within 10s: %v", local, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
