//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// The node's ephemeral port range, narrowed so the node's own sockets use
// most of it: kproxy (no --proxy-port-range) takes its proxy ports from
// the same range.
const (
	epLow, epHigh = 40000, 40299
	epHeld        = 200 // TCP connections and UDP sockets the node holds open
	epChurners    = 16  // goroutines opening and closing the node's sockets, per protocol
	epChurnHold   = time.Millisecond
	epChurnLimit  = 90 * time.Second
	epRounds      = 12 // manifests written
	epPerRound    = 10 // services added (and as many removed) each round
	epSinkPort    = 9200
)

// testEphemeralPorts runs kproxy (nftables portal) in a node whose own
// outgoing TCP connections and UDP sockets use most of
// net.ipv4.ip_local_port_range and keep taking and freeing the rest,
// while services come and go: every proxy port is taken from that range.
// Each must serve, and none may be lost to the node's sockets between
// being chosen and being listened on (kproxy then logs "address already
// in use" and retries).
func testEphemeralPorts(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.tp.Node.MustRun(t, "sysctl", "-qw", fmt.Sprintf("net.ipv4.ip_local_port_range=%d %d", epLow, epHigh))
	sink := netip.AddrPortFrom(e.be.IPs4[1], epSinkPort).String()
	e.be.MustDo(t, func() error {
		s, err := backends.StartSink(sink)
		if err != nil {
			return err
		}
		t.Cleanup(s.Close)
		return nil
	})
	// The node's own sockets: all to one destination per protocol, so a
	// new connection cannot share a port with the held ones (TCP reuses a
	// connect()ed port only towards another destination) and takes one of
	// the ports left, from which kproxy's proxy ports come too.
	udpDst := netip.AddrPortFrom(e.be.IPs4[1], backendUDP).String()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	e.tp.Node.MustDo(t, func() error {
		for range epHeld {
			for _, dst := range []struct{ network, addr string }{{"tcp", sink}, {"udp", udpDst}} {
				c, err := net.DialTimeout(dst.network, dst.addr, 5*time.Second)
				if err != nil {
					return fmt.Errorf("the node's own %s socket %d: %w", dst.network, len(held), err)
				}
				held = append(held, c)
			}
		}
		return nil
	})
	stop := e.churnNodePorts(t, sink, udpDst)
	defer stop()

	services := func(round int) []int {
		var ids []int
		for i := round * epPerRound; i < (round+2)*epPerRound; i++ {
			ids = append(ids, i)
		}
		return ids
	}
	e.replaceManifest(t, e.portsManifest(services(0)))
	p := e.start(t)
	for round := range epRounds {
		if round > 0 {
			e.replaceManifest(t, e.portsManifest(services(round)))
		}
		want := map[string]bool{}
		for _, i := range services(round) {
			want[fmt.Sprintf("e2e/ports-%d:http/TCP", i)] = true
			want[fmt.Sprintf("e2e/ports-%d:dns/UDP", i)] = true
		}
		start := time.Now()
		e.waitState(t, p, fmt.Sprintf("round %d: %d service ports listening", round, len(want)), func(st map[string]spState) bool {
			if len(st) != len(want) {
				return false
			}
			for id, s := range st {
				if !want[id] || s.ProxyPort == 0 || len(s.ListenAddresses) == 0 || s.Error != "" {
					return false
				}
			}
			return true
		})
		t.Logf("round %d: %d service ports listening after %v", round, len(want), time.Since(start).Round(time.Millisecond))
	}
	ops := stop()
	t.Logf("the node opened and closed %d sockets of its own meanwhile", ops)

	for _, i := range services(epRounds - 1) {
		ip := portsClusterIP(i)
		e.expectBackend(t, e.tp.Client, "tcp", svcAddr(ip, webTCP))
		e.expectBackend(t, e.tp.Client, "udp", svcAddr(ip, webUDP))
	}
	log, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	var tcp int
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "address already in use") {
			lost = append(lost, line)
			if strings.Contains(line, "tcp") {
				tcp++
			}
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d times (%d TCP) kproxy logged a port already in use; the first: %s", len(lost), tcp, lost[0])
	}
}

// churnNodePorts opens and closes the node's own sockets, TCP connections
// to tcpDst (closed with a reset: no TIME_WAIT) and connected UDP sockets
// to udpDst, from epChurners goroutines for each, until the returned stop is called
// (it returns how many were opened; calling it again returns 0) or
// epChurnLimit passes.
func (e *env) churnNodePorts(t *testing.T, tcpDst, udpDst string) (stop func() int64) {
	ctx, cancel := context.WithTimeout(context.Background(), epChurnLimit)
	var ops atomic.Int64
	var wg sync.WaitGroup
	for _, dst := range []struct{ network, addr string }{{"tcp", tcpDst}, {"udp", udpDst}} {
		for range epChurners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.tp.Node.Do(func() error {
					for ctx.Err() == nil {
						c, err := net.DialTimeout(dst.network, dst.addr, time.Second)
						if err != nil {
							continue // the range is used up for now
						}
						if tc, ok := c.(*net.TCPConn); ok {
							tc.SetLinger(0)
						}
						time.Sleep(epChurnHold) // load: the port is held meanwhile
						c.Close()
						ops.Add(1)
					}
					return nil
				})
			}()
		}
	}
	var once sync.Once
	stop = func() int64 {
		n := int64(0)
		once.Do(func() {
			cancel()
			wg.Wait()
			n = ops.Load()
		})
		return n
	}
	t.Cleanup(func() { stop() })
	return stop
}

func portsClusterIP(i int) string { return fmt.Sprintf("198.18.4.%d", i+1) }

// portsManifest is the services e2e/ports-<i> for each i: a cluster IP
// each, http 80/TCP and dns 53/UDP, the backend's IPv4 endpoints.
func (e *env) portsManifest(ids []int) string {
	var b strings.Builder
	for _, i := range ids {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: ports-%[1]d, namespace: e2e}
spec:
  clusterIP: %[2]s
  ports:
  - {name: http, protocol: TCP, port: %[3]d, targetPort: %[5]d}
  - {name: dns, protocol: UDP, port: %[4]d, targetPort: %[6]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ports-%[1]d-1
  namespace: e2e
  labels: {kubernetes.io/service-name: ports-%[1]d}
addressType: IPv4
ports:
- {name: http, protocol: TCP, port: %[5]d}
- {name: dns, protocol: UDP, port: %[6]d}
endpoints:
`, i, portsClusterIP(i), webTCP, webUDP, backendTCP, backendUDP)
		for _, ip := range e.be.IPs4 {
			fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}}\n", ip)
		}
	}
	return b.String()
}
