package actors

import "github.com/kproxy/kproxy/portal"

// transparent reports whether the Portal's connections dial node-local
// endpoints from the client's address: the service port asks for it and
// the portal mode's rules route the replies back to kproxy (nftables,
// iptables). The bind and netsh modes serve such a service port from the
// node's address.
func (p *Portal) transparent() bool {
	return p.sp.GetPreserveSourceIp() && (p.cfg.PortalMode == portal.ModeNftables || p.cfg.PortalMode == portal.ModeIPTables)
}
