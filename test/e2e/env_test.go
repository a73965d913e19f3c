//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/netnstest"
)

// env is one topology with backends, a manifest, and the kproxy
// processes started on it.
type env struct {
	bin, mode string
	dir       string // manifests and logs
	manifest  string
	tp        *netnstest.Topology
	be        *netnstest.Backend
	procs     int
	tokenFile string   // the admin token of the last kproxy started
	adminAt   string   // the admin address of the next kproxy started ("": binarytest.AdminAddress)
	path      string   // kproxy's $PATH when set
	wrap      []string // a command kproxy runs under (setpriv ...) when set
	// noFaults starts kproxy without fault injection, whose connections
	// all take the goroutine data path: then they take the event loops.
	noFaults bool

	backendNames []string // what the backends answer: their addresses
	mu           sync.Mutex
	seen         map[string]bool
}

func newEnv(t *testing.T, bin, mode string) *env {
	t.Helper()
	tp := netnstest.NewTopology(t)
	// Forwarding on, as on a real node: with a kernel that cannot reject
	// in prerouting, and with iptables, a non-local service IP without
	// endpoints is rejected in the forward hook.
	tp.SetForwarding(t, true)
	e := &env{bin: bin, mode: mode, dir: t.TempDir(), tp: tp, be: tp.AddBackend(t, 2), seen: map[string]bool{}}
	e.manifest = filepath.Join(e.dir, "services.yaml")
	// Pods route everything via the node, as a pod's default route does:
	// a reply to a client's own address (externalTrafficPolicy Local)
	// goes back through the node.
	e.be.MustRun(t, "ip", "route", "add", "default", "via", e.be.NodeIP4.String())
	e.be.MustRun(t, "ip", "-6", "route", "add", "default", "via", e.be.NodeIP6.String())
	for _, ip := range append(append([]netip.Addr{}, e.be.IPs4...), e.be.IPs6...) {
		name := ip.String()
		e.backendNames = append(e.backendNames, name)
		e.be.MustDo(t, func() error {
			tcp, err := backends.StartTCP(name, netip.AddrPortFrom(ip, backendTCP).String())
			if err != nil {
				return err
			}
			t.Cleanup(tcp.Close)
			udp, err := backends.StartUDP(name, netip.AddrPortFrom(ip, backendUDP).String())
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

// askBackend sends "ping" to addr from ns and returns the name of the
// backend that answered: TCP backends answer "name\n" and echo until EOF,
// UDP backends answer "name:ping".
func (e *env) askBackend(ns *netnstest.Netns, proto string, addr netip.AddrPort, timeout time.Duration) (string, error) {
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

// expectBackend wants an answer within 2 s from a backend of the
// frontend's own IP family (backends answer with their address), as
// kube-proxy serves each family's frontends from that family's endpoints.
func (e *env) expectBackend(t *testing.T, ns *netnstest.Netns, proto string, addr netip.AddrPort) {
	t.Helper()
	name, err := e.askBackend(ns, proto, addr, 2*time.Second)
	if err != nil {
		t.Errorf("%s %s from %s: %v; want a backend's answer", proto, addr, ns.Name, err)
		return
	}
	if be, err := netip.ParseAddr(name); err != nil || be.Is4() != addr.Addr().Unmap().Is4() {
		t.Errorf("%s %s from %s: answered by backend %s, of the other IP family", proto, addr, ns.Name, name)
	}
}

// expectNoBackend wants no backend's answer (refused, unreachable or
// silence, within a second).
func (e *env) expectNoBackend(t *testing.T, ns *netnstest.Netns, proto string, addr netip.AddrPort) {
	t.Helper()
	got, err := netnstest.Exchange(ns, proto, addr, []byte("ping"), time.Second)
	if err == nil {
		t.Errorf("%s %s from %s: answered %q, want no answer", proto, addr, ns.Name, got)
	}
}

func webPort(proto string) int {
	if proto == "udp" {
		return webUDP
	}
	return webTCP
}

func webNodePort(proto string) int {
	if proto == "udp" {
		return webNodeUDP
	}
	return webNodeTCP
}

func svcAddr(ip string, port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}
