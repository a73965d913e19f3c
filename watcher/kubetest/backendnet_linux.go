package kubetest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BackendNet is a network namespace this test creates, joined to the
// test's own namespace by a veth pair. Backends of Kubernetes-source tests
// listen there: the apiserver rejects loopback EndpointSlice addresses, and
// tests may send traffic only to loopback or to namespaces they create.
//
// Each BackendNet takes a /28 of 198.51.100.0/24 (TEST-NET-2), locked with a
// file so test processes running in parallel never share one: the test side
// of the veth is the first host address, backends get the following ones.
type BackendNet struct {
	name   string
	prefix netip.Prefix
	next   netip.Addr
	lock   *os.File
	mu     sync.Mutex
}

var backendNets sync.Mutex

// NewBackendNet creates the namespace and veth pair, removed at cleanup.
// The test is skipped when namespaces cannot be created (not root).
func NewBackendNet(t testing.TB) *BackendNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kubetest: backend namespaces need root")
	}
	backendNets.Lock()
	defer backendNets.Unlock()
	b := &BackendNet{}
	for k := range 16 {
		slot := (os.Getpid() + k) % 16
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("kproxy-backendnet-%d.lock", slot)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			continue
		}
		b.lock = f
		b.prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(16 * slot)}), 28)
		b.name = fmt.Sprintf("kpk-%d-%d", os.Getpid(), slot)
		break
	}
	if b.lock == nil {
		t.Fatal("kubetest: all 16 backend network slots are in use")
	}
	host := b.prefix.Addr().Next()
	b.next = host.Next()
	veth, peer := fmt.Sprintf("kpk%da", b.prefix.Addr().As4()[3]/16), fmt.Sprintf("kpk%db", b.prefix.Addr().As4()[3]/16)
	cleanup := func() {
		exec.Command("ip", "link", "del", veth).Run()
		exec.Command("ip", "netns", "del", b.name).Run()
		b.lock.Close()
	}
	cleanup() // a crashed earlier run may have left them
	b.lock, _ = os.OpenFile(b.lock.Name(), os.O_RDWR, 0o600)
	unix.Flock(int(b.lock.Fd()), unix.LOCK_EX)
	t.Cleanup(cleanup)
	for _, args := range [][]string{
		{"netns", "add", b.name},
		{"link", "add", veth, "type", "veth", "peer", "name", peer, "netns", b.name},
		{"addr", "add", fmt.Sprintf("%s/%d", host, b.prefix.Bits()), "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", b.name, "link", "set", "lo", "up"},
		{"-n", b.name, "link", "set", peer, "up"},
		{"-n", b.name, "route", "add", "default", "via", host.String(), "dev", peer, "onlink"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			if args[0] == "netns" {
				t.Skipf("kubetest: cannot create a network namespace: %v: %s", err, out)
			}
			t.Fatalf("kubetest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return b
}

// AddIP gives the namespace one more backend address and returns it.
func (b *BackendNet) AddIP(t testing.TB) netip.Addr {
	t.Helper()
	b.mu.Lock()
	ip := b.next
	b.next = ip.Next()
	b.mu.Unlock()
	last := b.prefix.Addr().As4()
	last[3] += 14 // .15 of the /28 is its broadcast address
	if !b.prefix.Contains(ip) || ip.Compare(netip.AddrFrom4(last)) > 0 {
		t.Fatalf("kubetest: backend network %s is full", b.prefix)
	}
	peer := fmt.Sprintf("kpk%db", b.prefix.Addr().As4()[3]/16)
	if out, err := exec.Command("ip", "-n", b.name, "addr", "add", ip.String()+"/32", "dev", peer).CombinedOutput(); err != nil {
		t.Fatalf("kubetest: add backend address %s: %v: %s", ip, err, out)
	}
	// The test side reaches it through the veth's /28 route.
	return ip
}

// Do runs fn on a thread inside the namespace; sockets fn creates stay in
// the namespace after it returns, whichever thread later serves them.
func (b *BackendNet) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked, so it dies with the goroutine rather
		// than returning to the scheduler inside the namespace.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + b.name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", b.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a listener inside the namespace.
func (b *BackendNet) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	if err := b.Do(func() (err error) { l, err = net.Listen(network, addr); return err }); err != nil {
		t.Fatalf("kubetest: listen in backend namespace on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
