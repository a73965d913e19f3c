package e2e

import (
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

// Two pods of the node on one bridge, as a CNI bridge (cni0) sets them:
// the node's address on the bridge is their gateway.
var (
	pbBridgeIP = netip.MustParseAddr("203.0.113.33")
	pbClient   = netip.MustParseAddr("203.0.113.34")
	pbServer   = netip.MustParseAddr("203.0.113.35")
)

const pbClusterIP = "198.18.0.72"

// testPodSourceSameBridge: a client pod and the service's endpoint, a pod
// on the same bridge of the same node (Kubernetes' "preserve source pod
// IP" spec with its pods on one node). kproxy dials from the client pod's
// address; the endpoint's reply, which the bridge would switch straight
// to the client pod, is brought up to the node's stack by the bridge
// capture and reaches kproxy's socket: the endpoint sees the client pod's
// address over TCP and UDP, and a connection held across kill -9 goes
// on. Traffic between the pods themselves, and the node's own, is
// switched and answered as before.
func testPodSourceSameBridge(t *testing.T, bin, mode string, loops bool) {
	e := newEnv(t, bin, mode)
	e.noFaults = loops // fault injection's connections take the goroutine path
	client := netnstest.New(t, "cpod")
	server := netnstest.New(t, "spod")
	node := e.tp.Node
	node.MustRun(t, "ip", "link", "add", "kb0", "type", "bridge")
	node.MustRun(t, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
	for _, p := range []struct {
		ns   *netnstest.Netns
		dev  string
		addr netip.Addr
	}{{client, "kbc", pbClient}, {server, "kbs", pbServer}} {
		netnstest.Veth(t, node, p.dev, p.ns, "eth0")
		node.MustRun(t, "ip", "link", "set", p.dev, "master", "kb0")
		p.ns.AddAddr(t, "eth0", p.addr.String()+"/28")
		p.ns.MustRun(t, "ip", "route", "add", "default", "via", pbBridgeIP.String())
	}
	servePod(t, server, pbServer)

	e.replaceManifest(t, podServiceManifest("pb", pbClusterIP, pbServer, "node"))
	sock := startKeeper(t, e, filepath.Join(e.dir, "keeper.sock"))
	args := []string{"--cluster-cidr", "203.0.113.32/28", "--socket-keeper", sock}
	if !loops {
		args = append(args, "--tcp-event-loops=false")
	}
	p := e.start(t, args...)
	e.waitRules(t, []string{pbClusterIP}, nil)
	// The bridge gets its address and comes up once kproxy runs, as a
	// CNI's does with the node's first pod: programmed then.
	node.AddAddr(t, "kb0", pbBridgeIP.String()+"/28")
	node.MustRun(t, "ip", "link", "set", "kb0", "up")
	waitLogged(t, p, `"bridges":["kb0"]`)
	if got := node.MustRun(t, "nft", "list", "table", "bridge", "kproxy"); !strings.Contains(got, "ether daddr set") {
		t.Fatalf("no bridge capture rule for kb0:\n%s", got)
	}

	for i := range 20 {
		got, err := askPeerWithin(client, netip.Addr{}, svcAddr(pbClusterIP, 80), 5*time.Second)
		if err != nil || got != pbClient {
			t.Fatalf("ask %d over tcp: the endpoint on the client pod's bridge saw %s (%v), want the client pod's %s", i, got, err, pbClient)
		}
		answer, err := netnstest.Exchange(client, "udp", svcAddr(pbClusterIP, 53), []byte("ping\n"), 5*time.Second)
		if got, _ := netip.ParseAddr(strings.TrimSpace(answer)); err != nil || got != pbClient {
			t.Fatalf("ask %d over udp: the endpoint on the client pod's bridge saw %q (%v), want the client pod's %s", i, answer, err, pbClient)
		}
	}
	// A connection held across kill -9 (the socket keeper holds both its
	// sockets) and across a restart: the endpoint's replies over the
	// bridge still come up to the next process's sockets.
	echo := holdEcho(t, client, svcAddr(pbClusterIP, 81))
	echo("before the kill")
	waitProxyPorts(t, e)
	p.stop(t, syscall.SIGKILL)
	p = e.start(t, args...)
	waitLogged(t, p, "connections taken over from the socket keeper")
	echo("after the kill")
	if got, err := askPeerWithin(client, netip.Addr{}, svcAddr(pbClusterIP, 80), 5*time.Second); err != nil || got != pbClient {
		t.Errorf("after the kill: the endpoint saw %s (%v), want %s", got, err, pbClient)
	}

	// Only kproxy's replies are brought up: the pods reaching each other
	// and the node reaching a pod are switched and answered as before.
	if got, err := askPeerFrom(client, netip.Addr{}, netip.AddrPortFrom(pbServer, psTCP)); err != nil || got != pbClient {
		t.Errorf("the client pod straight to the other pod: it saw %s (%v), want %s", got, err, pbClient)
	}
	if got, err := askPeerFrom(node, netip.Addr{}, netip.AddrPortFrom(pbServer, psTCP)); err != nil || got != pbBridgeIP {
		t.Errorf("the node straight to the pod: it saw %s (%v), want %s", got, err, pbBridgeIP)
	}
}
