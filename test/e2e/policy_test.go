//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/netnstest"
)

// Addresses of the traffic-policy manifest: cluster IPs in the service CIDR
// kproxy is told (198.18.0.0/24), external IPs and LB IPs outside it.
const (
	policyServiceCIDRs = "198.18.0.0/24,2001:db8:5::/112"
	policyClusterCIDRs = "198.51.100.0/24,2001:db8:1::/48" // the backends stand in for pods

	etpCluster, etpExternal, etpLB = "198.18.0.40", "198.18.1.40", "198.18.2.40"
	itpCluster                     = "198.18.0.41"
	fwCluster, fwExternal, fwLB    = "198.18.0.42", "198.18.1.42", "198.18.2.42"
	noneCluster                    = "198.18.0.43"
	bothCluster, bothLB            = "198.18.0.44", "198.18.2.44"
	unallocated                    = "198.18.0.99" // in the service CIDR, no service's

	etpNodePort, fwNodePort, noneNodePort, bothNodePort = 30040, 30042, 30043, 30044

	// allowedClient is the client's second address, the only source
	// e2e/fw's loadBalancerSourceRanges allow.
	allowedClient = "192.0.2.3"
)

// testTrafficPolicy runs kproxy with --cluster-cidr and
// --service-cluster-ip-range against services whose endpoints are all on
// another node, and checks kube-proxy's answers flow by flow: a policy
// that leaves a scope without endpoints drops (a service without any
// endpoint rejects); the node's own and the pods' traffic to an external
// destination of an externalTrafficPolicy Local service uses every
// endpoint; loadBalancerSourceRanges drop other sources at the LB IP
// only; unserved ports of cluster IPs are rejected and unallocated service
// IPs never leave the node.
func testTrafficPolicy(t *testing.T, bin, mode string) {
	e := newEnv(t, bin, mode)
	e.writePolicyManifest(t)
	// The backends are the pods: they reach services through the node.
	pod := e.be
	pod.MustRun(t, "ip", "route", "add", netnstest.ServiceRange4, "via", pod.NodeIP4.String())
	e.tp.Client.AddAddr(t, "kc0", allowedClient+"/24")
	// A host beyond the node's route for the service range answers on an
	// address no service holds: what leaks out of the node reaches it.
	e.tp.Client.AddAddr(t, "kc0", unallocated+"/32")
	rogue := startRogue(t, e.tp.Client, svcAddr(unallocated, webTCP))

	p := e.start(t, "--cluster-cidr", policyClusterCIDRs, "--service-cluster-ip-range", policyServiceCIDRs)
	e.waitState(t, p, "the policy services listening", func(st map[string]spState) bool {
		for _, sp := range []string{"e2e/etp-remote:http/TCP", "e2e/itp-remote:http/TCP", "e2e/fw:http/TCP", "e2e/none:http/TCP", "e2e/both-local:http/TCP"} {
			if s, ok := st[sp]; !ok || s.ProxyPort == 0 || len(s.ListenAddresses) == 0 {
				return false
			}
		}
		return len(st) == 5
	})
	e.waitRules(t, []string{etpLB, itpCluster, fwLB, noneCluster, bothLB}, nil)
	t.Logf("%s rules:\n%s", mode, e.rules(t))
	node4 := netip.AddrPortFrom(netnstest.NodeIP4, 0)
	nodePort := func(port int) netip.AddrPort { return netip.AddrPortFrom(node4.Addr(), uint16(port)) }
	podNodePort := func(port int) netip.AddrPort { return netip.AddrPortFrom(pod.NodeIP4, uint16(port)) }

	t.Run("DropNotReject", func(t *testing.T) {
		// externalTrafficPolicy Local, no local endpoint: external
		// traffic from outside the cluster is dropped.
		for _, addr := range []netip.AddrPort{svcAddr(etpExternal, webTCP), svcAddr(etpLB, webTCP), nodePort(etpNodePort)} {
			expectDropped(t, e.tp.Client, "tcp", addr)
		}
		e.expectBackend(t, e.tp.Client, "tcp", svcAddr(etpCluster, webTCP))
		// internalTrafficPolicy Local, no local endpoint: cluster-IP
		// traffic is dropped, from anywhere.
		expectDropped(t, e.tp.Client, "tcp", svcAddr(itpCluster, webTCP))
		expectDropped(t, e.tp.Node, "tcp", svcAddr(itpCluster, webTCP))
		// Both Local, no local endpoint: dropped from outside.
		expectDropped(t, e.tp.Client, "tcp", svcAddr(bothCluster, webTCP))
		expectDropped(t, e.tp.Client, "tcp", svcAddr(bothLB, webTCP))
		// No endpoint anywhere: rejected at once.
		netnstest.ExpectRefused(t, e.tp.Client, "tcp", svcAddr(noneCluster, webTCP))
		netnstest.ExpectRefused(t, e.tp.Client, "tcp", nodePort(noneNodePort))
	})

	t.Run("NoLocalEndpointsMetric", func(t *testing.T) {
		// kube-proxy's gauge: itp-remote and both-local drop internal
		// traffic; etp-remote and both-local external traffic.
		resp, err := e.tp.Node.HTTPClient(2 * time.Second).Get("http://127.0.0.1:10249/metrics")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(raw)
		for _, want := range []string{
			`kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"} 2`,
			`kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"} 2`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})

	t.Run("ShortCircuitLocalTraffic", func(t *testing.T) {
		// The node's own traffic and the pods' use every endpoint.
		for _, addr := range []netip.AddrPort{svcAddr(etpExternal, webTCP), svcAddr(etpLB, webTCP), nodePort(etpNodePort)} {
			e.expectBackend(t, e.tp.Node, "tcp", addr)
		}
		for _, addr := range []netip.AddrPort{svcAddr(etpExternal, webTCP), svcAddr(etpLB, webTCP), podNodePort(etpNodePort)} {
			e.expectBackend(t, pod.Netns, "tcp", addr)
		}
		// Both policies Local: cluster-IP traffic stays local (none, so
		// dropped), external traffic from the node or a pod does not.
		e.expectBackend(t, e.tp.Node, "tcp", svcAddr(bothLB, webTCP))
		e.expectBackend(t, e.tp.Node, "tcp", nodePort(bothNodePort))
		e.expectBackend(t, pod.Netns, "tcp", svcAddr(bothLB, webTCP))
		expectDropped(t, e.tp.Node, "tcp", svcAddr(bothCluster, webTCP))
	})

	t.Run("LoadBalancerSourceRanges", func(t *testing.T) {
		expectDropped(t, e.tp.Client, "tcp", svcAddr(fwLB, webTCP))
		e.expectBackendFrom(t, e.tp.Client, netip.MustParseAddr(allowedClient), svcAddr(fwLB, webTCP))
		// The node's own address is not in the ranges either.
		expectDropped(t, e.tp.Node, "tcp", svcAddr(fwLB, webTCP))
		// Only the LB IP is subject to them.
		e.expectBackend(t, e.tp.Client, "tcp", svcAddr(fwExternal, webTCP))
		e.expectBackend(t, e.tp.Client, "tcp", svcAddr(fwCluster, webTCP))
		e.expectBackend(t, e.tp.Client, "tcp", nodePort(fwNodePort))
		// The invalid entry was ignored and said so.
		if log, _ := os.ReadFile(p.Log); !strings.Contains(string(log), "Invalid CIDR ignored") || !strings.Contains(string(log), "not-a-cidr") {
			t.Errorf("kproxy's log does not report the ignored range \"not-a-cidr\"")
		}
	})

	t.Run("ServiceCIDRCatchAll", func(t *testing.T) {
		// A cluster IP's unserved port or protocol: rejected.
		for _, ns := range []*netnstest.Netns{e.tp.Client, e.tp.Node} {
			netnstest.ExpectRefused(t, ns, "tcp", svcAddr(fwCluster, webTCP+1))
			netnstest.ExpectRefused(t, ns, "udp", svcAddr(fwCluster, webTCP))
		}
		// An unallocated service IP: dropped, never routed out.
		expectDropped(t, e.tp.Node, "tcp", svcAddr(unallocated, webTCP))
		if n := rogue.accepted(); n != 0 {
			t.Errorf("%d connections to the unallocated %s left the node and reached a host beyond it", n, unallocated)
		}
	})
}

// writePolicyManifest writes the traffic-policy services; every endpoint is
// on node "other", none on kproxy's node "node":
//
//	e2e/etp-remote  LoadBalancer, externalTrafficPolicy Local
//	e2e/itp-remote  ClusterIP, internalTrafficPolicy Local
//	e2e/fw          LoadBalancer, loadBalancerSourceRanges [192.0.2.3/32, not-a-cidr]
//	e2e/none        NodePort, no endpoints
//	e2e/both-local  LoadBalancer, both policies Local
func (e *env) writePolicyManifest(t *testing.T) {
	t.Helper()
	var b strings.Builder
	service := func(name, typ, cluster, external, lb string, nodePort int, extra string) {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: e2e}\nspec:\n  type: %s\n  clusterIP: %s\n", name, typ, cluster)
		if external != "" {
			fmt.Fprintf(&b, "  externalIPs: [%s]\n", external)
		}
		b.WriteString(extra)
		if nodePort != 0 {
			fmt.Fprintf(&b, "  ports: [{name: http, protocol: TCP, port: %d, targetPort: %d, nodePort: %d}]\n", webTCP, backendTCP, nodePort)
		} else {
			fmt.Fprintf(&b, "  ports: [{name: http, protocol: TCP, port: %d, targetPort: %d}]\n", webTCP, backendTCP)
		}
		if lb != "" {
			fmt.Fprintf(&b, "status: {loadBalancer: {ingress: [{ip: %s}]}}\n", lb)
		}
		if name == "none" {
			return
		}
		fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s-1, namespace: e2e, labels: {kubernetes.io/service-name: %s}}\naddressType: IPv4\nports: [{name: http, protocol: TCP, port: %d}]\nendpoints:\n", name, name, backendTCP)
		for _, ip := range e.be.IPs4 {
			fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}, nodeName: other}\n", ip)
		}
	}
	service("etp-remote", "LoadBalancer", etpCluster, etpExternal, etpLB, etpNodePort, "  externalTrafficPolicy: Local\n")
	service("itp-remote", "ClusterIP", itpCluster, "", "", 0, "  internalTrafficPolicy: Local\n")
	service("fw", "LoadBalancer", fwCluster, fwExternal, fwLB, fwNodePort, "  loadBalancerSourceRanges: [\""+allowedClient+"/32\", not-a-cidr]\n")
	service("none", "NodePort", noneCluster, "", "", noneNodePort, "")
	service("both-local", "LoadBalancer", bothCluster, "", bothLB, bothNodePort, "  externalTrafficPolicy: Local\n  internalTrafficPolicy: Local\n")
	e.replaceManifest(t, b.String())
}

// expectDropped wants silence: no answer and no refusal, within a
// second (a dropped SYN or datagram only times out).
func expectDropped(t *testing.T, ns *netnstest.Netns, proto string, addr netip.AddrPort) {
	t.Helper()
	got, err := netnstest.Exchange(ns, proto, addr, []byte("ping"), time.Second)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s %s from %s: got %q, %v; want it dropped (a timeout)", proto, addr, ns.Name, got, err)
	}
}

// expectBackendFrom is expectBackend over TCP from a chosen source address.
func (e *env) expectBackendFrom(t *testing.T, ns *netnstest.Netns, src netip.Addr, addr netip.AddrPort) {
	t.Helper()
	var got string
	err := ns.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		c, err := d.Dial("tcp", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		name, err := backends.ReadName(bufio.NewReader(c))
		got = name
		return err
	})
	if err != nil || !strings.Contains(strings.Join(e.backendNames, " "), got) || got == "" {
		t.Errorf("tcp %s from %s (%s): %q, %v; want a backend's answer", addr, ns.Name, src, got, err)
	}
}

// rogue is a TCP listener beyond the node that counts what reaches it.
type rogue struct{ n chan struct{} }

func startRogue(t *testing.T, ns *netnstest.Netns, addr netip.AddrPort) *rogue {
	t.Helper()
	ln := ns.Listen(t, "tcp", addr.String())
	r := &rogue{n: make(chan struct{}, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("rogue\n"))
			c.Close()
			select {
			case r.n <- struct{}{}:
			case <-ctx.Done():
				return
			default:
			}
		}
	}()
	return r
}

func (r *rogue) accepted() int { return len(r.n) }
