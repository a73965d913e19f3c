package conntrack

import (
	"net/netip"

	"github.com/kproxy/kproxy/portal/rules"
)

// Filter says which UDP conntrack entries the portal rules it was made from
// have made stale: every entry of a rule's frontend (service IP and port,
// or node port) except those NATed to the rule's proxy port; for a rule
// that rejects (or was removed), every one. That includes entries that
// are not NATed at all: datagrams sent before the rule was programmed
// made them, and they would keep bypassing it.
type Filter struct {
	ips       map[netip.AddrPort]rules.Rule
	nodePorts map[uint16]rules.Rule
}

// NewFilter builds the filter of rs; rules of other protocols than UDP are
// left out.
func NewFilter(rs []rules.Rule) *Filter {
	f := &Filter{ips: map[netip.AddrPort]rules.Rule{}, nodePorts: map[uint16]rules.Rule{}}
	for _, r := range rs {
		switch {
		case r.Protocol != "udp":
		case r.NodePort:
			f.nodePorts[uint16(r.Port)] = r
		default:
			f.ips[netip.AddrPortFrom(r.IP.Unmap(), uint16(r.Port))] = r
		}
	}
	return f
}

// Empty reports whether the filter can match nothing (no UDP rule).
func (f *Filter) Empty() bool { return len(f.ips) == 0 && len(f.nodePorts) == 0 }

// Stale reports whether a UDP entry is stale: origDst is where its first
// packet went, replySrc where replies come from (for a NATed entry, the
// address and proxy port it was redirected to).
func (f *Filter) Stale(origDst, replySrc netip.AddrPort) bool {
	origDst = netip.AddrPortFrom(origDst.Addr().Unmap(), origDst.Port())
	replySrc = netip.AddrPortFrom(replySrc.Addr().Unmap(), replySrc.Port())
	r, ok := f.ips[origDst]
	if !ok {
		r, ok = f.nodePorts[origDst.Port()]
	}
	nated := replySrc != origDst
	natedToProxy := nated && !r.Reject && !r.Drop && int(replySrc.Port()) == r.ProxyPort
	shortCircuited := nated && r.ShortCircuitPort != 0 && int(replySrc.Port()) == r.ShortCircuitPort
	return ok && !natedToProxy && !shortCircuited
}
