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
	// StateDir is where a mode keeps what it must remember across
	// processes: netsh lists the service IPs it added there, so a restart
	// or `kproxy cleanup` removes them. Empty means nowhere (on Windows,
	// %ProgramData%\kproxy).
	StateDir string
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
