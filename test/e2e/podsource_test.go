//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/netnstest"
)

// A second node and a pod on it: node2 joins the node over a link of
// their own (the cluster's network), and the remote pod hangs off node2.
// The client is a pod of the node (on its link, in --cluster-cidr).
var (
	psNodeIP   = netip.MustParseAddr("203.0.113.1")
	psNode2IP  = netip.MustParseAddr("203.0.113.2")
	psNode2Pod = netip.MustParseAddr("203.0.113.17") // node2's address on its pod's link
	psRemote   = netip.MustParseAddr("203.0.113.18") // the pod on node2
)

const (
	psClusterIP = "198.18.0.71"
	psTCP       = 9300
	psUDP       = 9353
	psEcho      = 9301 // an echo on the remote pod, for a connection held across a kill
)

// testPodSourceAcrossNodes: a plain ClusterIP service (no annotation),
// its one endpoint a pod on another node. With --cluster-cidr holding
// the client pod, the endpoint sees the pod's own address over TCP (on
// the event loops, or on goroutines) and UDP, as kube-proxy's DNAT keeps
// it: kproxy dials from the pod's address, the endpoint answers the pod,
// the answer routes to the pod's node, this one, and the transparent
// rules take it to kproxy's socket instead of the pod. Nothing else loses
// its packets to that: the pod reaching the remote pod directly, and the
// node itself, are answered as before. A connection held across kill -9
// (a socket keeper) goes on, so do new connections and UDP queries across
// kills, and after a restart the next connections still
// see the pod.
func testPodSourceAcrossNodes(t *testing.T, bin, mode string, loops bool) {
	e := newEnv(t, bin, mode)
	e.noFaults = loops // fault injection's connections take the goroutine path
	node2 := netnstest.New(t, "node2")
	remote := netnstest.New(t, "rpod")
	netnstest.Veth(t, e.tp.Node, "kx0", node2, "kx1")
	e.tp.Node.AddAddr(t, "kx0", psNodeIP.String()+"/28")
	node2.AddAddr(t, "kx1", psNode2IP.String()+"/28")
	netnstest.Veth(t, node2, "kx2", remote, "kp0")
	node2.AddAddr(t, "kx2", psNode2Pod.String()+"/28")
	remote.AddAddr(t, "kp0", psRemote.String()+"/28")
	// Routes as a CNI's: each node reaches the other's pods through it,
	// and a pod's default route is its node.
	remote.MustRun(t, "ip", "route", "add", "default", "via", psNode2Pod.String())
	node2.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	node2.MustRun(t, "ip", "route", "add", "192.0.2.0/24", "via", psNodeIP.String())
	e.tp.Node.MustRun(t, "ip", "route", "add", "203.0.113.16/28", "via", psNode2IP.String())
	e.tp.Client.MustRun(t, "ip", "route", "add", "203.0.113.16/28", "via", netnstest.NodeIP4.String())
	servePod(t, remote, psRemote)

	e.replaceManifest(t, podServiceManifest("ps", psClusterIP, psRemote, "node2"))
	sock := startKeeper(t, e, filepath.Join(e.dir, "keeper.sock"))
	args := []string{"--cluster-cidr", "192.0.2.0/24", "--socket-keeper", sock}
	if !loops {
		args = append(args, "--tcp-event-loops=false")
	}
	p := e.start(t, args...)
	e.waitRules(t, []string{psClusterIP}, nil)

	const asks = 20
	for i := range asks {
		for _, proto := range []string{"tcp", "udp"} {
			port := 80
			if proto == "udp" {
				port = 53
			}
			got, err := askPeer(e, proto, svcAddr(psClusterIP, port))
			if err != nil || got != netnstest.ClientIP4 {
				t.Fatalf("ask %d over %s: the endpoint on another node saw %s (%v), want the client pod's %s", i, proto, got, err, netnstest.ClientIP4)
			}
		}
	}
	// Counted per dial and per flow: a dial the ladder retried counts
	// twice, two asks from one reused port are one flow.
	if got := metricValue(e.metrics(t), "kproxy_transparent_connections_total"); got < asks+1 {
		t.Errorf("kproxy_transparent_connections_total %d, want at least %d (every TCP connection and the flows from the pod's address)", got, asks+1)
	}
	// The capture takes only the replies of kproxy's own connections.
	if got, err := askPeerFrom(e.tp.Client, netip.Addr{}, netip.AddrPortFrom(psRemote, psTCP)); err != nil || got != netnstest.ClientIP4 {
		t.Errorf("the client pod straight to the remote pod: it saw %s (%v), want %s", got, err, netnstest.ClientIP4)
	}
	if got, err := askPeerFrom(e.tp.Node, netip.Addr{}, netip.AddrPortFrom(psRemote, psTCP)); err != nil || got != psNodeIP {
		t.Errorf("the node straight to the remote pod: it saw %s (%v), want %s", got, err, psNodeIP)
	}

	// A connection held across kill -9: the socket keeper holds both of
	// its sockets, the next process adopts them, and the endpoint's
	// replies, addressed to the pod, still reach kproxy's socket.
	echo := holdEcho(t, e.tp.Client, svcAddr(psClusterIP, 81))
	echo("before the kill")
	// The kill comes once the proxy ports are recorded (within 100 ms of
	// the first state), as any kill a node sees: the next process takes
	// the same ones, and the keeper's sockets with them.
	waitProxyPorts(t, e)
	p = podSourceAcrossKills(t, e, node2, p, args, echo)

	// A restart: the rules and policy routing are the next process's.
	if p.stop(t, syscall.SIGTERM) != 0 {
		t.Errorf("kproxy exited non-zero on SIGTERM")
	}
	e.start(t, args...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := askPeer(e, "tcp", svcAddr(psClusterIP, 80))
		if err == nil && got == netnstest.ClientIP4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a restart: the endpoint saw %s (%v), want %s", got, err, netnstest.ClientIP4)
		}
		time.Sleep(50 * time.Millisecond) // polling: the restarted process's first serving has no event here
	}
	if got := e.policyRoutingCount(t); got == 0 {
		t.Errorf("no policy-routing rule while kproxy runs")
	}
	if !strings.Contains(e.rules(t), "kproxy") && !strings.Contains(e.rules(t), "KPROXY") {
		t.Errorf("no kproxy rules while it runs")
	}
}

// policyRoutingCount is how many rules and routes policyRouting lists.
func (e *env) policyRoutingCount(t *testing.T) int {
	rules, routes := e.policyRouting(t)
	return len(rules) + len(routes)
}

// podSourceAcrossKills: new connections and UDP queries from the pod go on
// across 4 kill -9 of p (its next processes started with args), and the
// held connection (echo) after the first; it returns the last process.
func podSourceAcrossKills(t *testing.T, e *env, node2 *netnstest.Netns, p *proc, args []string, echo func(string)) *proc {
	// New connections from the pod go on across kills, those the killed
	// process was dialling included: node2 drops a quarter of the SYNs
	// towards its pod (a lossy link), so dials are in flight when the
	// kill comes. Each has 10 s: kproxy's dial ladder sends a SYN every
	// second once past its first steps, so a connection fails only after
	// 12 SYNs lost in a row (a resolver's 5 s would fail after 7, one
	// connection in 16,384: a run in about 65).
	node2.MustRun(t, "nft", "add table ip loss; add chain ip loss f { type filter hook forward priority 0; }; "+
		"add rule ip loss f ip daddr "+psRemote.String()+" tcp flags & (syn|ack) == syn numgen random mod 4 == 0 drop")
	var lost killWindowFailures
	load := startHandoverLoad(t, nil, "", func() error {
		start := time.Now()
		got, err := askPeerWithin(e.tp.Client, netip.Addr{}, svcAddr(psClusterIP, 80), 10*time.Second)
		if err == nil && got != netnstest.ClientIP4 {
			err = fmt.Errorf("the endpoint saw %s, want %s", got, netnstest.ClientIP4)
		}
		lost.note(start, err)
		return err
	}, 4, 0)
	// UDP queries from a new socket each (a resolver's), answered by the
	// remote pod: flows dialled from the pod's address across the kills.
	var udpLost killWindowFailures
	udpLoad := startHandoverLoad(t, nil, "", func() error {
		start := time.Now()
		answer, err := netnstest.Exchange(e.tp.Client, "udp", svcAddr(psClusterIP, 53), []byte("ping\n"), 5*time.Second)
		if got, perr := netip.ParseAddr(strings.TrimSpace(answer)); err == nil && (perr != nil || got != netnstest.ClientIP4) {
			err = fmt.Errorf("the endpoint saw %q, want %s", answer, netnstest.ClientIP4)
		}
		udpLost.note(start, err)
		return err
	}, 4, 0)
	for i := range 4 {
		load.waitProgress(t)
		udpLoad.waitProgress(t)
		lost.kill(time.Now())
		udpLost.kill(time.Now())
		p.stop(t, syscall.SIGKILL)
		p = e.start(t, args...)
		waitLogged(t, p, "connections taken over from the socket keeper")
		if i == 0 {
			echo("after the kill")
		}
	}
	load.waitProgress(t)
	udpLoad.waitProgress(t)
	udpOK, udpFailed, _, _ := udpLoad.stop(t)
	udpLost.check(t, "UDP queries from the pod across 4 kill -9", udpOK, udpFailed, unanswered)
	ok, failed, _, _ := load.stop(t)
	lost.check(t, "connections from the pod across 4 kill -9", ok, failed, reset)
	node2.MustRun(t, "nft", "delete table ip loss")
	return p
}

// podServiceManifest is a ClusterIP service name at clusterIP whose one
// endpoint, a pod at endpoint on node, serves servePod's ports: http
// (TCP 80), dns (UDP 53) and echo (TCP 81).
func podServiceManifest(name, clusterIP string, endpoint netip.Addr, node string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: e2e}
spec:
  clusterIP: %[2]s
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: %[3]d}
  - {name: dns, protocol: UDP, port: 53, targetPort: %[4]d}
  - {name: echo, protocol: TCP, port: 81, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: e2e, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %[3]d}, {name: dns, protocol: UDP, port: %[4]d}, {name: echo, protocol: TCP, port: %[5]d}]
endpoints: [{addresses: ["%[6]s"], conditions: {ready: true}, nodeName: %[7]s}]
`, name, clusterIP, psTCP, psUDP, psEcho, endpoint, node)
}

// servePod runs, in ns on addr, what podServiceManifest's endpoint
// serves: servePeers' peer-address answers and an echo.
func servePod(t *testing.T, ns *netnstest.Netns, addr netip.Addr) {
	servePeers(t, ns, []netip.Addr{addr}, psTCP, psUDP)
	ns.MustDo(t, func() error {
		echo, err := backends.StartTCP(addr.String(), netip.AddrPortFrom(addr, psEcho).String())
		if err == nil {
			t.Cleanup(echo.Close)
		}
		return err
	})
}

// holdEcho opens a connection from ns to svc, an echo service, reads the
// echo's name, and returns a check of the connection that fails the test
// unless a line sent comes back (when says when, for the message).
func holdEcho(t *testing.T, ns *netnstest.Netns, svc netip.AddrPort) func(when string) {
	t.Helper()
	held, err := ns.DialContext(context.Background(), "tcp", svc.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	rd := bufio.NewReader(held)
	held.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := backends.ReadName(rd); err != nil {
		t.Fatalf("held connection: %v", err)
	}
	return func(when string) {
		t.Helper()
		held.SetDeadline(time.Now().Add(5 * time.Second))
		msg := "ping " + when + "\n"
		if _, err := held.Write([]byte(msg)); err != nil {
			t.Fatalf("held connection, %s: %v", when, err)
		}
		if got, err := rd.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("held connection, %s: echoed %q (%v), want %q", when, got, err, msg)
		}
	}
}

// waitProxyPorts waits until kproxy has recorded its proxy ports (within
// 100 ms of the first state), which the next process takes with the
// keeper's sockets: a kill before that is one a node never sees twice.
func waitProxyPorts(t *testing.T, e *env) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(e.dir, "proxy-ports.json")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("kproxy recorded no proxy ports within 10 s")
		}
		time.Sleep(10 * time.Millisecond) // polling the file: no event to await
	}
}
