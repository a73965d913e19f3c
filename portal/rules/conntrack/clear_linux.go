package conntrack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kproxy/kproxy/portal/rules"
)

// Table is the kernel's conntrack table, in the network namespace of the
// calling process.
type Table struct{}

// ClearStale deletes the UDP entries that rs have made stale (see Filter)
// in both families and returns how many went.
func (Table) ClearStale(rs []rules.Rule) (int, error) {
	f := NewFilter(rs)
	if f.Empty() {
		return 0, nil
	}
	total := 0
	for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, netlinkFilter{f})
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("delete stale UDP conntrack entries: %w", err)
		}
	}
	return total, nil
}

// netlinkFilter adapts Filter to netlink's dump-and-delete.
type netlinkFilter struct{ f *Filter }

func (n netlinkFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	return n.f.Stale(addrPort(flow.Forward.DstIP, flow.Forward.DstPort), addrPort(flow.Reverse.SrcIP, flow.Reverse.SrcPort))
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), port)
}
