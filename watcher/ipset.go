package watcher

import (
	"net/netip"

	netutils "k8s.io/utils/net"

	"github.com/kproxy/kproxy/messages"
)

// parseIP accepts a plain IPv4 or IPv6 address. Zones ("fe80::1%eth0") are
// rejected because Kubernetes never carries them and a proxy cannot listen
// on them portably. IPv4-mapped IPv6 is treated as the IPv4 address it is.
//
// IPv4 written with leading zeros ("198.018.000.010") is read as decimal,
// as kube-proxy reads it (k8s.io/utils/net ParseIPSloppy): the API server
// kept accepting such legacy addresses in existing objects, so refusing
// them would drop a service kube-proxy serves.
func parseIP(s string) (netip.Addr, bool) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		ip := netutils.ParseIPSloppy(s)
		if ip == nil {
			return netip.Addr{}, false
		}
		addr, _ = netip.AddrFromSlice(ip)
	}
	if addr.Zone() != "" {
		return netip.Addr{}, false
	}
	return addr.Unmap(), true
}

// ipSet splits addresses by family, in canonical form and without
// duplicates, keeping the input order (the first cluster IP is the primary).
// Invalid strings are dropped: validation has already reported them. An
// empty set is nil (the getters read it as empty): most service ports have
// no external or load-balancer IPs, and would otherwise hold two empty
// sets each.
func ipSet(ips ...string) *messages.IPSet {
	if len(ips) == 0 {
		return nil
	}
	set := &messages.IPSet{}
	seen := make(map[netip.Addr]bool, len(ips))
	for _, s := range ips {
		addr, ok := parseIP(s)
		if !ok || seen[addr] {
			continue
		}
		seen[addr] = true
		if addr.Is4() {
			set.V4 = append(set.V4, addr.String())
		} else {
			set.V6 = append(set.V6, addr.String())
		}
	}
	if set.Len() == 0 {
		return nil
	}
	return set
}
