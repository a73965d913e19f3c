package watcher

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netutils "k8s.io/utils/net"
)

// loadBalancerSourceRanges reads spec.loadBalancerSourceRanges as
// kube-proxy does: each entry trimmed, parsed leniently (IPv4 with leading
// zeros as decimal), masked to its network. An entry that does not parse
// is ignored, with an error naming it, and the service keeps serving with
// the rest (kube-proxy logs "Invalid CIDR ignored"). Duplicates are kept
// once, in order.
func loadBalancerSourceRanges(svc *corev1.Service) (ranges []string, bad []error) {
	seen := map[netip.Prefix]bool{}
	for i, s := range svc.Spec.LoadBalancerSourceRanges {
		s = strings.TrimSpace(s)
		if s == "" {
			continue // kube-proxy ignores empty strings silently
		}
		_, n, err := netutils.ParseCIDRSloppy(s)
		if err != nil {
			bad = append(bad, fmt.Errorf("spec.loadBalancerSourceRanges[%d]: %q is not a CIDR, ignored", i, s))
			continue
		}
		addr, _ := netip.AddrFromSlice(n.IP) // 4 bytes for IPv4
		ones, _ := n.Mask.Size()
		p := netip.PrefixFrom(addr, ones).Masked()
		if !p.IsValid() || seen[p] {
			continue
		}
		seen[p] = true
		ranges = append(ranges, p.String())
	}
	return ranges, bad
}

// SourceRangeErrors lists the entries of spec.loadBalancerSourceRanges
// that are ignored, for a source to report once per service change.
func SourceRangeErrors(svc *corev1.Service) []error {
	_, bad := loadBalancerSourceRanges(svc)
	return bad
}
