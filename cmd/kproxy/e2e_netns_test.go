//go:build linux

package main

// End-to-end tests of the kproxy binary with kernel portals, in network
// namespaces (portal/netnstest):
//
//	client (192.0.2.1, 2001:db8::1) --kc0/kn0-- node (192.0.2.2, 2001:db8::2) --kn1/kb0-- backend
//	                                            runs kproxy                            198.51.100.2-3
//	                                                                                   2001:db8:1::2-3
//
// The client routes the service ranges (198.18.0.0/15, 2001:db8:5::/64) via
// the node. The backend runs real TCP and UDP servers (bench/backends) that
// say who they are. kproxy runs in the node as a separate process (ip netns
// exec), with its admin API on the node's loopback; readiness is polled
// there, never slept for.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/bench/backends"
	"github.com/kproxy/kproxy/portal/netnstest"
)

// Service addresses of the e2e manifest (documentation and benchmarking
// ranges only).
const (
	e2eAdminAddress = "127.0.0.1:10260" // on the node's own loopback

	e2eWebCluster4  = "198.18.0.10"
	e2eWebExternal4 = "198.18.1.10"
	e2eWebLB4       = "198.18.2.10"
	e2eWebCluster6  = "2001:db8:5::10"
	e2eWebExternal6 = "2001:db8:5::1:10"
	e2eWebLB6       = "2001:db8:5::2:10"
	e2eEmpty4       = "198.18.0.20"
	e2eEmpty6       = "2001:db8:5::20"
	e2eGone4        = "198.18.0.30"

	e2eWebTCP, e2eWebUDP       = 80, 53       // e2e/web ports
	e2eWebNodeTCP, e2eWebNodeU = 30080, 30053 // e2e/web node ports
	e2eEmptyNodeTCP            = 30081        // e2e/empty node ports
	e2eEmptyNodeUDP            = 30054
	e2eGoneTCP, e2eGoneUDP     = 8080, 8053 // e2e/gone ports
	e2eBackendTCP              = 9000
	e2eBackendUDP              = 9053
)

// Service ports of the manifest, as the admin API names them.
const (
	e2eSPWebTCP   = "e2e/web:http/TCP"
	e2eSPWebUDP   = "e2e/web:dns/UDP"
	e2eSPEmptyTCP = "e2e/empty:http/TCP"
	e2eSPEmptyUDP = "e2e/empty:dns/UDP"
	e2eSPGoneTCP  = "e2e/gone:web/TCP"
	e2eSPGoneUDP  = "e2e/gone:dns/UDP"
)

func e2eServicePorts(withGone bool) []string {
	sps := []string{e2eSPWebTCP, e2eSPWebUDP, e2eSPEmptyTCP, e2eSPEmptyUDP}
	if withGone {
		sps = append(sps, e2eSPGoneTCP, e2eSPGoneUDP)
	}
	return sps
}

// TestE2ENetns runs the kproxy binary in a node namespace with nftables and
// with iptables portals (in parallel, in separate topologies).
func TestE2ENetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("end-to-end portal tests need root (network namespaces, nftables, iptables)")
	}
	netnstest.New(t, "probe") // skips when the kernel refuses namespaces, before the build
	bin := e2eBuild(t)
	t.Run("Nftables", func(t *testing.T) {
		t.Parallel()
		e2eNeed(t, "nft")
		testE2ENftables(t, bin)
	})
	t.Run("IPTables", func(t *testing.T) {
		t.Parallel()
		e2eNeed(t, "iptables-restore", "iptables-save")
		testE2EIPTables(t, bin)
	})
}

func e2eNeed(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not installed (apt-get install -y nftables iptables): %v", name, err)
		}
	}
}

// e2eBuild builds the binary once for the whole test, from the repository
// root, into the test's temporary directory.
func e2eBuild(t *testing.T) string {
	t.Helper()
	root := filepath.Join("..", "..")
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			root = filepath.Dir(gomod)
		}
	}
	bin := filepath.Join(t.TempDir(), "kproxy")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kproxy")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kproxy in %s: %v\n%s", root, err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// testE2ENftables is the full matrix with --portal nftables.
func testE2ENftables(t *testing.T, bin string) {
	e := newE2E(t, bin, "nftables")
	p := e.start(t)
	e.waitReady(t, p, e2eServicePorts(true))
	e.waitRules(t, []string{e2eWebCluster4, e2eWebExternal4, e2eWebLB4, e2eWebCluster6, e2eWebExternal6, e2eWebLB6, e2eEmpty4, e2eEmpty6, e2eGone4}, nil)
	t.Logf("nft list table inet kproxy:\n%s", e.rules(t))

	t.Run("Matrix", func(t *testing.T) {
		e.checkMatrix(t, true)
		// Node ports on every local address when --nodeport-addresses is not set.
		for _, proto := range []string{"tcp", "udp"} {
			e.expectBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(e2eNodePort(proto))))
		}
		e.expectBackend(t, e.tp.Client, "tcp", e2eAddr(e2eGone4, e2eGoneTCP))
		e.expectBackend(t, e.tp.Client, "udp", e2eAddr(e2eGone4, e2eGoneUDP))
		e.checkSpread(t)
	})

	t.Run("PortalCrash", func(t *testing.T) { e.checkCrash(t) })

	t.Run("DeleteService", func(t *testing.T) {
		e.writeManifest(t, false)
		e.waitState(t, p, "e2e/gone deleted", func(st map[string]e2eSPState) bool {
			_, tcp := st[e2eSPGoneTCP]
			_, udp := st[e2eSPGoneUDP]
			return !tcp && !udp
		})
		e.waitRules(t, []string{e2eWebCluster4, e2eEmpty4}, []string{e2eGone4})
		e.expectNoBackend(t, e.tp.Client, "tcp", e2eAddr(e2eGone4, e2eGoneTCP))
		e.expectNoBackend(t, e.tp.Client, "udp", e2eAddr(e2eGone4, e2eGoneUDP))
		e.expectNoBackend(t, e.tp.Node, "tcp", e2eAddr(e2eGone4, e2eGoneTCP))
		// The others are untouched.
		e.expectBackend(t, e.tp.Client, "tcp", e2eAddr(e2eWebCluster4, e2eWebTCP))
		e.expectBackend(t, e.tp.Client, "udp", e2eAddr(e2eWebCluster6, e2eWebUDP))
		netnstest.ExpectRefused(t, e.tp.Client, "tcp", e2eAddr(e2eEmpty4, e2eWebTCP))
	})

	t.Run("SIGTERM", func(t *testing.T) {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("kproxy exited with %d after SIGTERM, want 0", code)
		}
		if e.nftTablePresent(t) {
			t.Errorf("table inet kproxy left after SIGTERM:\n%s", e.rules(t))
		}
	})

	// A crashed kproxy (SIGKILL) leaves its rules; the next start replaces
	// them: e2e/gone's rules (stale: it is not in the manifest any more)
	// disappear, and the new rules point at the new proxy ports.
	t.Run("SIGKILLRestart", func(t *testing.T) {
		e.writeManifest(t, true)
		p1 := e.start(t)
		before := e.waitReady(t, p1, e2eServicePorts(true))
		e.waitRules(t, []string{e2eWebCluster4, e2eGone4}, nil)
		p1.stop(t, syscall.SIGKILL)
		if !e.nftTablePresent(t) || !strings.Contains(e.rules(t), e2eGone4) {
			t.Fatalf("SIGKILL removed the rules (want them left behind):\n%s", e.rules(t))
		}
		e.writeManifest(t, false)
		p2 := e.start(t)
		after := e.waitReady(t, p2, e2eServicePorts(false))
		// Stale: e2e/gone's IP, and the old proxy ports (map elements
		// "... : PORT," or "... : PORT }") unless the new run reuses one.
		stale := []string{e2eGone4}
		for _, sp := range e2eServicePorts(true) {
			old, reused := before[sp].ProxyPort, false
			for _, s := range after {
				reused = reused || s.ProxyPort == old
			}
			if !reused {
				stale = append(stale, fmt.Sprintf(": %d,", old), fmt.Sprintf(": %d }", old))
			}
		}
		e.waitRules(t, []string{e2eWebCluster4, e2eWebCluster6, e2eEmpty4}, stale)
		t.Logf("proxy ports: %s %d -> %d, %s %d -> %d", e2eSPWebTCP, before[e2eSPWebTCP].ProxyPort, after[e2eSPWebTCP].ProxyPort,
			e2eSPWebUDP, before[e2eSPWebUDP].ProxyPort, after[e2eSPWebUDP].ProxyPort)
		for _, proto := range []string{"tcp", "udp"} {
			e.expectBackend(t, e.tp.Client, proto, e2eAddr(e2eWebCluster4, e2eWebPort(proto)))
			e.expectBackend(t, e.tp.Client, proto, e2eAddr(e2eWebCluster6, e2eWebPort(proto)))
			e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(e2eNodePort(proto))))
			e.expectBackend(t, e.tp.Node, proto, e2eAddr(e2eWebCluster4, e2eWebPort(proto)))
		}
		netnstest.ExpectRefused(t, e.tp.Client, "tcp", e2eAddr(e2eEmpty4, e2eWebTCP))
		e.expectNoBackend(t, e.tp.Client, "tcp", e2eAddr(e2eGone4, e2eGoneTCP))

		// kproxy cleanup after another SIGKILL removes the table.
		p2.stop(t, syscall.SIGKILL)
		if !e.nftTablePresent(t) {
			t.Fatal("SIGKILL removed the table (want it left behind)")
		}
		out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "nftables")
		if err != nil {
			t.Fatalf("kproxy cleanup --portal nftables: %v", err)
		}
		t.Logf("kproxy cleanup --portal nftables: %s", strings.TrimSpace(out))
		if e.nftTablePresent(t) {
			t.Errorf("table inet kproxy left after kproxy cleanup --portal nftables:\n%s", e.rules(t))
		}
		e.expectNoBackend(t, e.tp.Client, "tcp", e2eAddr(e2eWebCluster4, e2eWebTCP))
	})
}

// testE2EIPTables is the core matrix with --portal iptables, node ports
// restricted by --nodeport-addresses, then kproxy cleanup after a SIGKILL,
// then a SIGTERM shutdown.
func testE2EIPTables(t *testing.T, bin string) {
	e := newE2E(t, bin, "iptables")
	_, err6 := exec.LookPath("ip6tables-restore")
	v6 := err6 == nil
	p := e.start(t, "--nodeport-addresses", "192.0.2.0/24,2001:db8::/64")
	e.waitReady(t, p, e2eServicePorts(true))
	want := []string{e2eWebCluster4 + "/32", e2eEmpty4 + "/32", e2eGone4 + "/32"}
	if v6 {
		want = append(want, e2eWebCluster6+"/128")
	}
	e.waitRules(t, want, nil)
	t.Logf("iptables-save; ip6tables-save:\n%s", e.rules(t))

	t.Run("Matrix", func(t *testing.T) {
		e.checkMatrix(t, false)
		if v6 {
			for _, proto := range []string{"tcp", "udp"} {
				e.expectBackend(t, e.tp.Client, proto, e2eAddr(e2eWebCluster6, e2eWebPort(proto)))
				e.expectBackend(t, e.tp.Node, proto, e2eAddr(e2eWebCluster6, e2eWebPort(proto)))
			}
			netnstest.ExpectRefused(t, e.tp.Client, "tcp", e2eAddr(e2eEmpty6, e2eWebTCP))
		}
		// --nodeport-addresses: not on loopback nor on the node's backend link.
		for _, proto := range []string{"tcp", "udp"} {
			e.expectNoBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(e2eNodePort(proto))))
			e.expectNoBackend(t, e.tp.Node, proto, netip.AddrPortFrom(e.be.NodeIP4, uint16(e2eNodePort(proto))))
		}
		e.checkSpread(t)
	})

	t.Run("SIGKILLCleanup", func(t *testing.T) {
		p.stop(t, syscall.SIGKILL)
		if rules := e.rules(t); !strings.Contains(rules, "KUBE-PORTALS-") {
			t.Fatalf("SIGKILL removed the chains (want them left behind):\n%s", rules)
		}
		out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", "iptables")
		if err != nil {
			t.Fatalf("kproxy cleanup --portal iptables: %v", err)
		}
		t.Logf("kproxy cleanup --portal iptables: %s", strings.TrimSpace(out))
		if rules := e.rules(t); strings.Contains(rules, "KUBE-PORTALS-") || strings.Contains(rules, "KUBE-NODEPORT-") {
			t.Errorf("chains left after kproxy cleanup --portal iptables:\n%s", rules)
		}
		e.expectNoBackend(t, e.tp.Client, "tcp", e2eAddr(e2eWebCluster4, e2eWebTCP))
	})

	t.Run("SIGTERM", func(t *testing.T) {
		p := e.start(t)
		e.waitReady(t, p, e2eServicePorts(true))
		e.waitRules(t, want, nil)
		e.expectBackend(t, e.tp.Client, "tcp", e2eAddr(e2eWebCluster4, e2eWebTCP))
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("kproxy exited with %d after SIGTERM, want 0", code)
		}
		if rules := e.rules(t); strings.Contains(rules, "KUBE-PORTALS-") || strings.Contains(rules, "KUBE-NODEPORT-") {
			t.Errorf("chains left after SIGTERM:\n%s", rules)
		}
	})
}

// checkMatrix: from the client, cluster IP and node port (and with full,
// external and LB IPs, IPv4 and IPv6) reach a backend over TCP and UDP;
// from the node, the cluster IP and node port do (output hook); the service
// without endpoints is refused at once.
func (e *e2eEnv) checkMatrix(t *testing.T, full bool) {
	t.Helper()
	for _, proto := range []string{"tcp", "udp"} {
		port, nodePort := e2eWebPort(proto), e2eNodePort(proto)
		emptyNodePort := e2eEmptyNodeTCP
		if proto == "udp" {
			emptyNodePort = e2eEmptyNodeUDP
		}
		ips := []string{e2eWebCluster4}
		if full {
			ips = append(ips, e2eWebExternal4, e2eWebLB4, e2eWebCluster6, e2eWebExternal6, e2eWebLB6)
		}
		for _, ip := range ips {
			e.expectBackend(t, e.tp.Client, proto, e2eAddr(ip, port))
		}
		e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(nodePort)))
		e.expectBackend(t, e.tp.Node, proto, e2eAddr(e2eWebCluster4, port))
		e.expectBackend(t, e.tp.Node, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(nodePort)))
		if full {
			e.expectBackend(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP6, uint16(nodePort)))
			e.expectBackend(t, e.tp.Node, proto, e2eAddr(e2eWebCluster6, port))
		}

		netnstest.ExpectRefused(t, e.tp.Client, proto, e2eAddr(e2eEmpty4, port))
		netnstest.ExpectRefused(t, e.tp.Client, proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(emptyNodePort)))
		netnstest.ExpectRefused(t, e.tp.Node, proto, e2eAddr(e2eEmpty4, port))
		if full {
			netnstest.ExpectRefused(t, e.tp.Client, proto, e2eAddr(e2eEmpty6, port))
		}
	}
}

// checkSpread wants answers from more than one backend over the whole
// matrix (round-robin across the endpoints).
func (e *e2eEnv) checkSpread(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) < 2 {
		t.Errorf("answers came from %v only, want several of %v", e.seen, e.backendNames)
	}
}

// checkCrash crashes the TCP and UDP portals of e2e/web through kproxy
// chaos while a client loop runs across the crashes: no request fails, and
// the proxy ports and listen addresses stay.
func (e *e2eEnv) checkCrash(t *testing.T) {
	before, err := e.state()
	if err != nil {
		t.Fatal(err)
	}
	var ok, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	stop, done := make(chan struct{}), make(chan struct{})
	var stopOnce sync.Once
	stopLoop := func() {
		stopOnce.Do(func() { close(stop) })
		<-done
	}
	defer stopLoop()
	go func() {
		defer close(done)
		limit := time.Now().Add(20 * time.Second)
		for i := 0; i < 5000 && time.Now().Before(limit); i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, proto := range []string{"tcp", "udp"} {
				if _, err := e.askBackend(e.tp.Client, proto, e2eAddr(e2eWebCluster4, e2eWebPort(proto)), 2*time.Second); err != nil {
					failed.Add(1)
					errMu.Lock()
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("%s at %s: %v", proto, time.Now().Format("15:04:05.000"), err))
					}
					errMu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}
	}()
	waitCount := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; ok.Load()+failed.Load() < n; i++ {
			select {
			case <-done:
				t.Fatalf("client loop ended before %s (%d ok, %d failed)", what, ok.Load(), failed.Load())
			default:
			}
			if time.Now().After(deadline) || i > 1000 {
				t.Fatalf("client loop: %d requests before %s after 10s, want %d", ok.Load()+failed.Load(), what, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount("the crash", 20)
	for _, sp := range []string{e2eSPWebTCP, e2eSPWebUDP} {
		out, err := e.tp.Node.Run(e.bin, "chaos", "--admin-address", e2eAdminAddress, "crash", sp, "portal")
		if err != nil {
			t.Fatalf("kproxy chaos crash %s portal: %v", sp, err)
		}
		t.Logf("kproxy chaos crash %s portal: %s", sp, strings.TrimSpace(out))
	}
	after := e.waitState(t, nil, "portal restarts", func(st map[string]e2eSPState) bool {
		return st[e2eSPWebTCP].Restarts > before[e2eSPWebTCP].Restarts && st[e2eSPWebUDP].Restarts > before[e2eSPWebUDP].Restarts
	})
	n := ok.Load() + failed.Load()
	waitCount("the end", n+20)
	stopLoop()
	for _, sp := range []string{e2eSPWebTCP, e2eSPWebUDP} {
		b, a := before[sp], after[sp]
		t.Logf("%s: proxy port %d -> %d, listen %v -> %v, restarts %d -> %d", sp, b.ProxyPort, a.ProxyPort, b.ListenAddresses, a.ListenAddresses, b.Restarts, a.Restarts)
		if a.ProxyPort != b.ProxyPort || !slices.Equal(a.ListenAddresses, b.ListenAddresses) {
			t.Errorf("%s: the portal crash changed proxy port %d -> %d, listen addresses %v -> %v", sp, b.ProxyPort, a.ProxyPort, b.ListenAddresses, a.ListenAddresses)
		}
	}
	t.Logf("client loop across the crashes: %d ok, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d requests failed across the portal crashes: %v", failed.Load(), errs)
	}
}

// e2eEnv is one topology with backends, a manifest, and the kproxy
// processes started on it.
type e2eEnv struct {
	bin, mode string
	dir       string // manifests and logs
	manifest  string
	tp        *netnstest.Topology
	be        *netnstest.Backend
	procs     int

	backendNames []string // what the backends answer: their addresses
	mu           sync.Mutex
	seen         map[string]bool
}

func newE2E(t *testing.T, bin, mode string) *e2eEnv {
	t.Helper()
	tp := netnstest.NewTopology(t)
	// Forwarding on, as on a real node: with a kernel that cannot reject
	// in prerouting, and with iptables, a non-local service IP without
	// endpoints is rejected in the forward hook.
	tp.SetForwarding(t, true)
	e := &e2eEnv{bin: bin, mode: mode, dir: t.TempDir(), tp: tp, be: tp.AddBackend(t, 2), seen: map[string]bool{}}
	e.manifest = filepath.Join(e.dir, "services.yaml")
	for _, ip := range append(append([]netip.Addr{}, e.be.IPs4...), e.be.IPs6...) {
		name := ip.String()
		e.backendNames = append(e.backendNames, name)
		e.be.MustDo(t, func() error {
			tcp, err := backends.StartTCP(name, netip.AddrPortFrom(ip, e2eBackendTCP).String())
			if err != nil {
				return err
			}
			t.Cleanup(tcp.Close)
			udp, err := backends.StartUDP(name, netip.AddrPortFrom(ip, e2eBackendUDP).String())
			if err != nil {
				return err
			}
			t.Cleanup(udp.Close)
			return nil
		})
	}
	e.writeManifest(t, true)
	return e
}

// writeManifest writes the services (atomically: kproxy polls the file):
//
//	e2e/web    LoadBalancer, dual-stack: cluster, external and LB IPs,
//	           http 80/TCP (node port 30080) and dns 53/UDP (30053) -> the 4 backends
//	e2e/empty  NodePort, dual-stack, no endpoints: 80/TCP (30081), 53/UDP (30054)
//	e2e/gone   ClusterIP 198.18.0.30, 8080/TCP and 8053/UDP -> one backend (withGone only)
func (e *e2eEnv) writeManifest(t *testing.T, withGone bool) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: web, namespace: e2e}
spec:
  type: LoadBalancer
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[1]s
  clusterIPs: ["%[1]s", "%[2]s"]
  externalIPs: ["%[3]s", "%[4]s"]
  ports:
  - {name: http, protocol: TCP, port: %[7]d, targetPort: %[9]d, nodePort: %[10]d}
  - {name: dns, protocol: UDP, port: %[8]d, targetPort: %[11]d, nodePort: %[12]d}
status:
  loadBalancer:
    ingress: [{ip: "%[5]s"}, {ip: "%[6]s"}]
`, e2eWebCluster4, e2eWebCluster6, e2eWebExternal4, e2eWebExternal6, e2eWebLB4, e2eWebLB6,
		e2eWebTCP, e2eWebUDP, e2eBackendTCP, e2eWebNodeTCP, e2eBackendUDP, e2eWebNodeU)
	for _, family := range []struct {
		name string
		ips  []netip.Addr
	}{{"IPv4", e.be.IPs4}, {"IPv6", e.be.IPs6}} {
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-%s
  namespace: e2e
  labels: {kubernetes.io/service-name: web}
addressType: %s
ports:
- {name: http, protocol: TCP, port: %d}
- {name: dns, protocol: UDP, port: %d}
endpoints:
`, strings.ToLower(family.name), family.name, e2eBackendTCP, e2eBackendUDP)
		for _, ip := range family.ips {
			fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}, nodeName: backend}\n", ip)
		}
	}
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: e2e}
spec:
  type: NodePort
  ipFamilyPolicy: PreferDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[1]s
  clusterIPs: ["%[1]s", "%[2]s"]
  ports:
  - {name: http, protocol: TCP, port: %[3]d, targetPort: %[4]d, nodePort: %[5]d}
  - {name: dns, protocol: UDP, port: %[6]d, targetPort: %[7]d, nodePort: %[8]d}
`, e2eEmpty4, e2eEmpty6, e2eWebTCP, e2eBackendTCP, e2eEmptyNodeTCP, e2eWebUDP, e2eBackendUDP, e2eEmptyNodeUDP)
	if withGone {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: gone, namespace: e2e}
spec:
  clusterIP: %[1]s
  ports:
  - {name: web, protocol: TCP, port: %[2]d, targetPort: %[4]d}
  - {name: dns, protocol: UDP, port: %[3]d, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: gone-1
  namespace: e2e
  labels: {kubernetes.io/service-name: gone}
addressType: IPv4
ports:
- {name: web, protocol: TCP, port: %[4]d}
- {name: dns, protocol: UDP, port: %[5]d}
endpoints:
- {addresses: ["%[6]s"], conditions: {ready: true}}
`, e2eGone4, e2eGoneTCP, e2eGoneUDP, e2eBackendTCP, e2eBackendUDP, e.be.IPs4[0])
	}
	tmp := e.manifest + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.manifest); err != nil {
		t.Fatal(err)
	}
}

// e2eProc is one kproxy run in the node namespace.
type e2eProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // of Wait, once done is closed
}

// start runs kproxy run in the node namespace; cleanup kills it if it is
// still running and, when the test failed, shows the end of its log.
func (e *e2eEnv) start(t *testing.T, extra ...string) *e2eProc {
	t.Helper()
	e.procs++
	p := &e2eProc{log: filepath.Join(e.dir, fmt.Sprintf("kproxy-%d.log", e.procs)), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--portal", e.mode, "--source", "file:" + e.manifest, "--node-name", "node",
		"--log-format", "json", "--enable-fault-injection", "--admin-address", e2eAdminAddress,
		"--file-poll-interval", "100ms"}, extra...)
	p.cmd = e.tp.Node.Command(context.Background(), e.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", p.cmd, err)
	}
	t.Logf("started kproxy (pid %d): %s", p.cmd.Process.Pid, strings.Join(args, " "))
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("kproxy pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("end of %s:\n%s", p.log, e2eTail(p.log, 40))
		}
	})
	return p
}

// stop sends sig and waits (at most 15 s) for kproxy to exit; it returns
// the exit code (-1 when killed by a signal).
func (p *e2eProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to kproxy: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("kproxy did not exit within 15s of %v", sig)
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		t.Fatalf("kproxy: %v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func e2eTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// e2eSPState is what the admin API's GET /state says of one service port.
type e2eSPState struct {
	Key struct {
		Namespace, Name, PortName, Protocol string
	} `json:"key"`
	ListenAddresses []string          `json:"listenAddresses"`
	ProxyPort       int               `json:"proxyPort"`
	Restarts        int               `json:"restarts"`
	Endpoints       []json.RawMessage `json:"endpoints"`
	Error           string            `json:"error"`
	Deleted         bool              `json:"deleted"`
}

func (s e2eSPState) id() string {
	return fmt.Sprintf("%s/%s:%s/%s", s.Key.Namespace, s.Key.Name, s.Key.PortName, s.Key.Protocol)
}

// state asks the admin API, from inside the node, for the service ports
// (deleted ones left out).
func (e *e2eEnv) state() (map[string]e2eSPState, error) {
	resp, err := e.tp.Node.HTTPClient(2 * time.Second).Get("http://" + e2eAdminAddress + "/state")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /state: %s: %s", resp.Status, body)
	}
	var doc struct {
		State struct {
			ServicePorts []e2eSPState `json:"servicePorts"`
		} `json:"state"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("GET /state: %w: %s", err, body)
	}
	st := map[string]e2eSPState{}
	for _, sp := range doc.State.ServicePorts {
		if !sp.Deleted {
			st[sp.id()] = sp
		}
	}
	return st, nil
}

// waitState polls GET /state (every 50 ms, at most 15 s) until ok; p, if
// set, must not exit meanwhile.
func (e *e2eEnv) waitState(t *testing.T, p *e2eProc, what string, ok func(map[string]e2eSPState) bool) map[string]e2eSPState {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var st map[string]e2eSPState
	var err error
	for i := 0; ; i++ {
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("kproxy exited (%v) while waiting for %s; end of its log:\n%s", p.err, what, e2eTail(p.log, 40))
			default:
			}
		}
		if st, err = e.state(); err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) || i > 1000 {
			t.Fatalf("no %s within 15s: state %+v, error %v", what, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits until every service port in sps has a proxy port and
// listen addresses, and no others are there. The listeners must be on the
// unspecified address, at the proxy port.
func (e *e2eEnv) waitReady(t *testing.T, p *e2eProc, sps []string) map[string]e2eSPState {
	t.Helper()
	start := time.Now()
	st := e.waitState(t, p, "ready service ports "+strings.Join(sps, " "), func(st map[string]e2eSPState) bool {
		if len(st) != len(sps) {
			return false
		}
		for _, sp := range sps {
			s, ok := st[sp]
			if !ok || s.ProxyPort == 0 || len(s.ListenAddresses) == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("%d service ports ready after %v", len(sps), time.Since(start).Round(time.Millisecond))
	for _, sp := range sps {
		s := st[sp]
		for _, a := range s.ListenAddresses {
			if !e2eUnspecified(a, s.ProxyPort) {
				t.Errorf("%s listens on %q, want the unspecified address at proxy port %d", sp, a, s.ProxyPort)
			}
		}
		if s.Error != "" {
			t.Errorf("%s reports error %q", sp, s.Error)
		}
	}
	if n := len(st[e2eSPWebTCP].Endpoints); n != 4 {
		t.Errorf("%s has %d endpoints, want 4", e2eSPWebTCP, n)
	}
	if n := len(st[e2eSPEmptyTCP].Endpoints); n != 0 {
		t.Errorf("%s has %d endpoints, want 0", e2eSPEmptyTCP, n)
	}
	return st
}

// e2eUnspecified reports whether a listen address is the unspecified
// address (as Go prints a wildcard listener: ":port", or "[::]:port",
// "0.0.0.0:port") at port.
func e2eUnspecified(addr string, port int) bool {
	host, p, err := net.SplitHostPort(addr)
	if err != nil || p != strconv.Itoa(port) {
		return false
	}
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// rules dumps kproxy's kernel rules in the node: nft list table inet
// kproxy, or iptables-save and ip6tables-save.
func (e *e2eEnv) rules(t *testing.T) string {
	t.Helper()
	if e.mode == "nftables" {
		out, err := e.tp.Node.Run("nft", "list", "table", "inet", "kproxy")
		if err != nil {
			return "" // no table
		}
		return out
	}
	out := e.tp.Node.MustRun(t, "iptables-save")
	if _, err := exec.LookPath("ip6tables-save"); err == nil {
		out += e.tp.Node.MustRun(t, "ip6tables-save")
	}
	return out
}

func (e *e2eEnv) nftTablePresent(t *testing.T) bool {
	t.Helper()
	for _, line := range strings.Split(e.tp.Node.MustRun(t, "nft", "list", "tables"), "\n") {
		if strings.TrimSpace(line) == "table inet kproxy" {
			return true
		}
	}
	return false
}

// waitRules polls the kernel rules (every 50 ms, at most 10 s) until they
// mention every string of present and none of absent.
func (e *e2eEnv) waitRules(t *testing.T, present, absent []string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for i := 0; ; i++ {
		rules := e.rules(t)
		var missing, extra []string
		for _, s := range present {
			if !strings.Contains(rules, s) {
				missing = append(missing, s)
			}
		}
		for _, s := range absent {
			if strings.Contains(rules, s) {
				extra = append(extra, s)
			}
		}
		if len(missing) == 0 && len(extra) == 0 {
			t.Logf("%s rules in place after %v", e.mode, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) || i > 500 {
			t.Fatalf("%s rules after 10s: missing %v, still there %v:\n%s", e.mode, missing, extra, rules)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// askBackend sends "ping" to addr from ns and returns the name of the
// backend that answered: TCP backends answer "name\n" and echo until EOF,
// UDP backends answer "name:ping".
func (e *e2eEnv) askBackend(ns *netnstest.Netns, proto string, addr netip.AddrPort, timeout time.Duration) (string, error) {
	got, err := netnstest.Exchange(ns, proto, addr, []byte("ping"), timeout)
	if err != nil {
		return "", err
	}
	var name string
	if proto == "tcp" {
		r := bufio.NewReader(strings.NewReader(got))
		n, err := backends.ReadName(r)
		rest, _ := io.ReadAll(r)
		if err != nil || string(rest) != "ping" {
			return "", fmt.Errorf("answer %q is not a backend's", got)
		}
		name = n
	} else {
		n, ok := strings.CutSuffix(got, ":ping")
		if !ok {
			return "", fmt.Errorf("answer %q is not a backend's", got)
		}
		name = n
	}
	if !slices.Contains(e.backendNames, name) {
		return "", fmt.Errorf("answer %q from unknown backend %q", got, name)
	}
	e.mu.Lock()
	e.seen[name] = true
	e.mu.Unlock()
	return name, nil
}

// expectBackend wants a backend's answer within 2 s.
func (e *e2eEnv) expectBackend(t *testing.T, ns *netnstest.Netns, proto string, addr netip.AddrPort) {
	t.Helper()
	if _, err := e.askBackend(ns, proto, addr, 2*time.Second); err != nil {
		t.Errorf("%s %s from %s: %v; want a backend's answer", proto, addr, ns.Name, err)
	}
}

// expectNoBackend wants no backend's answer (refused, unreachable or
// silence, within a second).
func (e *e2eEnv) expectNoBackend(t *testing.T, ns *netnstest.Netns, proto string, addr netip.AddrPort) {
	t.Helper()
	got, err := netnstest.Exchange(ns, proto, addr, []byte("ping"), time.Second)
	if err == nil {
		t.Errorf("%s %s from %s: answered %q, want no answer", proto, addr, ns.Name, got)
	}
}

func e2eWebPort(proto string) int {
	if proto == "udp" {
		return e2eWebUDP
	}
	return e2eWebTCP
}

func e2eNodePort(proto string) int {
	if proto == "udp" {
		return e2eWebNodeU
	}
	return e2eWebNodeTCP
}

func e2eAddr(ip string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}
