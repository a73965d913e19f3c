package actors

import (
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/watcher"
)

// transparent reports whether the Portal's connections dial node-local
// endpoints from the client's address: the service port asks for it and
// the portal mode's rules route the replies back to kproxy (nftables,
// iptables). The bind and netsh modes serve such a service port from the
// node's address.
func (p *Portal) transparent() bool {
	return p.sp.GetPreserveSourceIp() && datapath.Transparent(p.cfg.PortalMode)
}

// warnTransparent logs, on each new configuration, that a service port
// asking for the client's address is served from the node's in this
// portal mode: the model (and so the state) does not know the mode.
func (p *Portal) warnTransparent() {
	if p.sp.GetPreserveSourceIp() && !p.transparent() {
		p.cfg.Log.Warn().Str("servicePort", p.sp.GetKey().ID()).Str("portal", p.cfg.PortalMode).
			Msg(watcher.PreserveSourceIPAnnotation + " needs a kernel portal mode (nftables, iptables): endpoints see the node's address")
	}
}
