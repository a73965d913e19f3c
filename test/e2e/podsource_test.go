//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
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
// kills, and after a restart the next connections still see the pod.
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
	servePeers(t, remote, []netip.Addr{psRemote}, psTCP, psUDP)
	remote.MustDo(t, func() error {
		echo, err := backends.StartTCP("remote", netip.AddrPortFrom(psRemote, psEcho).String())
		if err == nil {
			t.Cleanup(echo.Close)
		}
		return err
	})

	e.replaceManifest(t, fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: ps, namespace: e2e}
spec:
  clusterIP: %[1]s
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: %[2]d}
  - {name: dns, protocol: UDP, port: 53, targetPort: %[3]d}
  - {name: echo, protocol: TCP, port: 81, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ps, namespace: e2e, labels: {kubernetes.io/service-name: ps}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %[2]d}, {name: dns, protocol: UDP, port: %[3]d}, {name: echo, protocol: TCP, port: %[5]d}]
endpoints: [{addresses: ["%[4]s"], conditions: {ready: true}, nodeName: node2}]
`, psClusterIP, psTCP, psUDP, psRemote, psEcho))
	sock := filepath.Join(e.dir, "keeper.sock")
	keeper := startProc(t, e.tp.Node.Command(context.Background(), bin, "keep-sockets", "--socket", sock), filepath.Join(e.dir, "keeper.log"))
	t.Cleanup(func() { keeper.stop(t, syscall.SIGTERM) })
	waitLogged(t, keeper, "socket keeper ready")
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
	held, err := e.tp.Client.DialContext(context.Background(), "tcp", svcAddr(psClusterIP, 81).String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	rd := bufio.NewReader(held)
	echo := func(when string) {
		held.SetDeadline(time.Now().Add(5 * time.Second))
		if when == "before" {
			if _, err := backends.ReadName(rd); err != nil {
				t.Fatalf("held connection: %v", err)
			}
		}
		msg := "ping " + when + "\n"
		if _, err := held.Write([]byte(msg)); err != nil {
			t.Fatalf("held connection, %s the kill: %v", when, err)
		}
		if got, err := rd.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("held connection, %s the kill: echoed %q (%v), want %q", when, got, err, msg)
		}
	}
	echo("before")
	// The kill comes once the proxy ports are recorded (within 100 ms of
	// the first state), as any kill a node sees: the next process takes
	// the same ones, and the keeper's sockets with them.
	waitProxyPorts(t, e)
	// New connections from the pod go on across kills, those the killed
	// process was dialling included: node2 drops a quarter of the SYNs
	// towards its pod (a lossy link), so dials are in flight when the
	// kill comes. A resolver's deadline (5 s) to each.
	node2.MustRun(t, "nft", "add table ip loss; add chain ip loss f { type filter hook forward priority 0; }; "+
		"add rule ip loss f ip daddr "+psRemote.String()+" tcp flags & (syn|ack) == syn numgen random mod 4 == 0 drop")
	var lost killWindowFailures
	load := startHandoverLoad(t, nil, "", func() error {
		start := time.Now()
		got, err := askPeerWithin(e.tp.Client, netip.Addr{}, svcAddr(psClusterIP, 80), 5*time.Second)
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
			echo("after")
		}
	}
	load.waitProgress(t)
	udpLoad.waitProgress(t)
	udpOK, udpFailed, _, _ := udpLoad.stop(t)
	unread, udpOthers := udpLost.split(func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) })
	t.Logf("UDP queries from the pod across 4 kill -9: %d, %d failed (%d read in the instant before a kill)", udpOK, udpFailed, unread)
	for _, f := range udpOthers {
		t.Errorf("a UDP query from the pod sent %s got no answer across kill -9: %v", f.start.Format("15:04:05.000000"), f.err)
	}
	ok, failed, _, _ := load.stop(t)
	unkept, others := lost.split(func(err error) bool { return errors.Is(err, syscall.ECONNRESET) })
	t.Logf("connections from the pod across 4 kill -9: %d, %d failed (%d accepted in the instant before a kill)", ok, failed, unkept)
	for _, f := range others {
		t.Errorf("a connection from the pod started %s failed across kill -9: %v", f.start.Format("15:04:05.000000"), f.err)
	}
	node2.MustRun(t, "nft", "delete table ip loss")

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
