//go:build linux

package netnstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHostNet checks that the test process reaches servers on a HostNet's
// addresses, which are the namespace's and not its own, that two HostNets
// take different slots, and that cleanup removes the namespaces and veths.
func TestHostNet(t *testing.T) {
	var names []string
	var slots []int
	t.Run("Serve", func(t *testing.T) {
		h, h2 := NewHostNet(t, "host"), NewHostNet(t, "host2")
		for _, x := range []*HostNet{h, h2} {
			names = append(names, x.Name)
			slots = append(slots, int(x.prefix.Addr().As4()[3]/16))
		}
		if h.prefix == h2.prefix {
			t.Fatalf("two host networks share %s", h.prefix)
		}
		ip1, ip2 := h.AddIP(t), h.AddIP(t)
		if !h.prefix.Contains(ip1) || ip2 != ip1.Next() {
			t.Errorf("addresses %s, %s: want consecutive addresses in %s", ip1, ip2, h.prefix)
		}
		for _, ip := range []netip.Addr{ip1, ip2} {
			l := h.Listen(t, "tcp", netip.AddrPortFrom(ip, 0).String())
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Errorf("dial %s from the test process: %v", l.Addr(), err)
				continue
			}
			c.Close()
		}
		// The addresses are the namespace's, not the test process's.
		if l, err := net.Listen("tcp", netip.AddrPortFrom(ip1, 0).String()); err == nil {
			l.Close()
			t.Errorf("the test process can listen on %s", ip1)
		}
	})
	if len(names) != 2 {
		return // skipped
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for i, name := range names {
		if strings.Contains(string(out), name) {
			t.Errorf("namespace %s left after cleanup", name)
		}
		// Once the slot is ours, no other process can have made its veth.
		f, err := os.OpenFile(hostSlotLock(slots[i]), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Logf("slot %d taken again by another process, its veth not checked: %v", slots[i], err)
		} else if err := exec.Command("ip", "link", "show", fmt.Sprintf("kpth%d", slots[i])).Run(); err == nil {
			t.Errorf("veth kpth%d left after cleanup", slots[i])
		}
		f.Close()
	}
}
