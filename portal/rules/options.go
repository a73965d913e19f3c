package rules

import "net/netip"

// Options configure an Interface implementation.
type Options struct {
	// NodePortAddresses restricts node ports to local addresses within
	// these prefixes (kube-proxy's --nodeport-addresses). Empty means every
	// local address. When it is not empty, an IP family without a prefix in
	// the list gets no node ports. Loopback addresses are never node-port
	// destinations for traffic from other hosts; from the node itself they
	// are when NodePortAddresses is empty or includes them.
	NodePortAddresses []netip.Prefix
	// Interface is the Windows interface netsh adds service IPs to. Empty
	// means $INTERFACE_TO_ADD_SERVICE_IP, else "vEthernet (HNS Internal NIC)"
	// (winuserspace's defaults).
	Interface string
	// ClusterCIDRs are the pods' ranges (kube-proxy's --cluster-cidr): a
	// source within them is a pod, whose traffic to an external destination
	// of an externalTrafficPolicy Local service short-circuits to the
	// cluster's endpoints, as the node's own traffic always does. Empty:
	// only the node's traffic does (kube-proxy without a local-traffic
	// detector).
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs are the service cluster IP ranges (the API server's
	// --service-cluster-ip-range): traffic to an address within them that
	// no service holds is dropped rather than routed out. Traffic to a
	// cluster IP on a port no rule serves is rejected whether or not they
	// are known.
	ServiceCIDRs []netip.Prefix
	// StateDir is where a mode keeps what it must remember across
	// processes: netsh lists the service IPs it added there, so a restart
	// or `kproxy cleanup` removes them. Empty means nowhere (on Windows,
	// %ProgramData%\kproxy).
	StateDir string
	// NodeIPs are the node's own addresses. When a load-balancer IP's
	// source ranges admit one of them, the load-balancer IP itself is
	// admitted as a source too, as kube-proxy does: the node's request to
	// a VIP that is bound locally, or that its load balancer sends back,
	// arrives with the VIP as its source.
	NodeIPs []netip.Addr
	// ProxyPortFirst and ProxyPortLast bound the ports proxy ports are
	// allocated from (--port-range, else the kernel's ephemeral range).
	// Zero: any port.
	ProxyPortFirst, ProxyPortLast int
}

// ProxyPortSpan is the range proxy ports come from: 1-65535 unless set.
func (o Options) ProxyPortSpan() (first, last int) {
	if o.ProxyPortFirst < 1 || o.ProxyPortLast > 65535 || o.ProxyPortLast < o.ProxyPortFirst {
		return 1, 65535
	}
	return o.ProxyPortFirst, o.ProxyPortLast
}

// NodePortPrefixes returns the NodePortAddresses of one family, masked;
// all is true when node ports answer on every local address.
func (o Options) NodePortPrefixes(v6 bool) (prefixes []netip.Prefix, all bool) {
	if len(o.NodePortAddresses) == 0 {
		return nil, true
	}
	for _, p := range o.NodePortAddresses {
		if p.Addr().Is6() == v6 {
			prefixes = append(prefixes, p.Masked())
		}
	}
	return prefixes, false
}

// Family returns the prefixes of ps in one family, masked, without those
// contained in others.
func Family(ps []netip.Prefix, v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is6() == v6 {
			out = append(out, p.Masked())
		}
	}
	return MergePrefixes(out)
}

// MergePrefixes drops prefixes contained in others, and duplicates (nft
// refuses overlapping intervals).
func MergePrefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		covered := false
		for j, q := range ps {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// FirewallSources are the sources a rule's load-balancer IP admits: its
// source ranges, and the IP itself when they admit a node IP.
func (o Options) FirewallSources(r Rule) []netip.Prefix {
	ranges := r.Ranges()
	for _, ip := range o.NodeIPs {
		for _, p := range ranges {
			if p.Contains(ip) {
				return append(ranges, netip.PrefixFrom(r.IP, r.IP.BitLen()))
			}
		}
	}
	return ranges
}
