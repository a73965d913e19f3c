//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A UDP service of its own for the conntrack test.
const (
	dnsCluster4 = "198.18.0.40"
	spDNS       = "e2e/dns:dns/UDP"
)

// testUDPConntrack: a UDP client that keeps its source port keeps its
// conntrack entry, and the kernel NATs its datagrams by that entry, not by
// the rules. So kproxy must delete the entries its rule changes make stale:
// after a restart on another proxy port the client is answered again, and
// once the service has no endpoints its datagrams are rejected (ICMP port
// unreachable) instead of going to a listener with nothing to send them to.
func testUDPConntrack(t *testing.T, bin, mode string, wrap ...string) {
	e := newEnv(t, bin, mode)
	e.wrap = wrap
	e.writeDNSManifest(t, true)
	// Apart port ranges, so the restart surely moves the proxy port.
	p1 := e.start(t, "--port-range", "41000-41009")
	e.waitDNS(t, p1, 1)

	client := e.fixedPortUDPClient(t, dnsCluster4+":53")
	if err := client.answered(5 * time.Second); err != nil {
		t.Fatalf("before the restart: %v", err)
	}

	p1.stop(t, syscall.SIGKILL)
	p2 := e.start(t, "--port-range", "42000-42009")
	st := e.waitDNS(t, p2, 1)
	t.Logf("proxy port moved to %d", st.ProxyPort)
	// Rules follow the state within a moment; the entry must go with them.
	if err := client.answered(5 * time.Second); err != nil {
		t.Fatalf("after the restart on another proxy port, the client keeping its source port: %v", err)
	}

	e.writeDNSManifest(t, false)
	e.waitDNS(t, p2, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := client.ask(500 * time.Millisecond)
		if errors.Is(err, syscall.ECONNREFUSED) {
			break // rejected: the stale entry is gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the service lost its endpoints: %v, want connection refused (ICMP port unreachable)", err)
		}
	}
}

// fixedPortClient is a connected UDP socket in the client namespace with a
// fixed source port, as a DNS resolver or a game client may keep.
type fixedPortClient struct {
	e *env
	c *net.UDPConn
}

func (e *env) fixedPortUDPClient(t *testing.T, addr string) *fixedPortClient {
	t.Helper()
	var c *net.UDPConn
	e.tp.Client.MustDo(t, func() error {
		raddr, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return err
		}
		c, err = net.DialUDP("udp", &net.UDPAddr{Port: 45353}, raddr)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return &fixedPortClient{e: e, c: c}
}

// ask sends one datagram and returns the answer.
func (f *fixedPortClient) ask(timeout time.Duration) (string, error) {
	f.c.SetDeadline(time.Now().Add(timeout))
	if _, err := f.c.Write([]byte("ping")); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, err := f.c.Read(buf)
	return string(buf[:n]), err
}

// answered asks (every 300 ms at most, until timeout) until a backend
// answers; it returns the last error otherwise.
func (f *fixedPortClient) answered(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := f.ask(300 * time.Millisecond)
		if err == nil && strings.HasSuffix(got, ":ping") {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("answer %q is not a backend's", got)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no backend answered within %v: %w", timeout, err)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			time.Sleep(100 * time.Millisecond) // refused at once: pace the next datagram
		}
	}
}

// waitDNS waits until the dns service port listens with n endpoints.
func (e *env) waitDNS(t *testing.T, p *proc, n int) spState {
	t.Helper()
	st := e.waitState(t, p, fmt.Sprintf("%s listening with %d endpoints", spDNS, n), func(st map[string]spState) bool {
		s, ok := st[spDNS]
		return ok && s.ProxyPort != 0 && len(s.ListenAddresses) > 0 && len(s.Endpoints) == n
	})
	return st[spDNS]
}

// writeDNSManifest writes e2e/dns, 53/UDP at 198.18.0.40, with the first
// IPv4 backend as its endpoint, or none.
func (e *env) writeDNSManifest(t *testing.T, withEndpoint bool) {
	t.Helper()
	endpoints := "endpoints: []"
	if withEndpoint {
		endpoints = fmt.Sprintf("endpoints:\n- {addresses: [\"%s\"], conditions: {ready: true}}", e.be.IPs4[0])
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: dns, namespace: e2e}
spec:
  clusterIP: %s
  ports:
  - {name: dns, protocol: UDP, port: 53, targetPort: %d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: e2e
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports:
- {name: dns, protocol: UDP, port: %d}
%s
`, dnsCluster4, backendUDP, backendUDP, endpoints)
	e.replaceManifest(t, doc)
}
