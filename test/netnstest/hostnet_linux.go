//go:build linux

package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// HostNet is a namespace joined to the test process's own namespace by a
// veth pair, for code under test that runs in the test process itself (not
// in a Topology's node) and must reach servers on addresses that are not
// loopback. Servers listen inside it (Do, Listen) on addresses from AddIP;
// the test process reaches them through the veth.
//
// The test side of the veth lives in a namespace other test processes share,
// so each HostNet takes one of 16 /28s of 198.51.100.0/24, locked with a file
// while it lives: the test side is the /28's first host address, AddIP hands
// out the following ones.
type HostNet struct {
	*Netns
	prefix netip.Prefix
	dev    string // the veth's end inside the namespace

	mu   sync.Mutex
	next netip.Addr
}

// NewHostNet creates the namespace (see New) and the veth pair, with a
// default route in the namespace back to the test side; everything is
// removed at cleanup.
func NewHostNet(t testing.TB, role string) *HostNet {
	t.Helper()
	h := &HostNet{Netns: New(t, role), dev: "kh0"}
	slot := lockHostSlot(t)
	h.prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(16 * slot)}), 28)
	hostIP := h.prefix.Addr().Next()
	h.next = hostIP.Next()
	hostDev := fmt.Sprintf("kpth%d", slot)
	// A crashed run that held the slot may have left its end behind.
	exec.Command("ip", "link", "del", hostDev).Run()
	host := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("netnstest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	host("link", "add", hostDev, "type", "veth", "peer", "name", h.dev, "netns", h.Name)
	// Deleting the namespace deletes the pair too; deleting it first frees
	// the slot's address and route before the slot's lock is released.
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", hostDev).CombinedOutput(); err != nil {
			t.Errorf("netnstest: ip link del %s: %v: %s", hostDev, err, out)
		}
	})
	host("addr", "add", fmt.Sprintf("%s/%d", hostIP, h.prefix.Bits()), "dev", hostDev)
	host("link", "set", hostDev, "up")
	h.MustRun(t, "ip", "link", "set", h.dev, "up")
	h.MustRun(t, "ip", "route", "add", "default", "via", hostIP.String(), "dev", h.dev, "onlink")
	return h
}

// lockHostSlot takes a free slot (0 to 15) until cleanup, trying the
// process's own slot first. A flock conflicts with every other open of the
// file, so HostNets of one process take different slots too.
func lockHostSlot(t testing.TB) int {
	t.Helper()
	for k := range 16 {
		slot := (os.Getpid() + k) % 16
		f, err := os.OpenFile(hostSlotLock(slot), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("netnstest: %v", err)
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return slot
	}
	t.Fatal("netnstest: all 16 host network slots are in use")
	return 0
}

// hostSlotLock is the file locked while a slot is in use. Its name predates
// this package: test processes built from older trees (kubetest's
// BackendNet) lock the same files for the same /28s.
func hostSlotLock(slot int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("kproxy-backendnet-%d.lock", slot))
}

// AddIP gives the namespace one more address, reachable from the test
// process, and returns it.
func (h *HostNet) AddIP(t testing.TB) netip.Addr {
	t.Helper()
	h.mu.Lock()
	ip := h.next
	h.next = ip.Next()
	h.mu.Unlock()
	last := h.prefix.Addr().As4()
	last[3] += 14 // .15 of the /28 is its broadcast address
	if ip.Compare(netip.AddrFrom4(last)) > 0 {
		t.Fatalf("netnstest: host network %s is full", h.prefix)
	}
	// The test side reaches it through the veth's /28 route.
	h.AddAddr(t, h.dev, ip.String()+"/32")
	return ip
}
