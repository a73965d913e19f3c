package portal

import (
	"net/netip"

	"github.com/kproxy/kproxy/messages"
)

// RulesFor lists the kernel portal rules of one service port: its cluster
// IPs at the service port to proxyPort, and its external and load-balancer
// IPs and node port to externalProxyPort (proxyPort when zero). A scope
// without endpoints gets rejects instead, so clients fail fast rather than
// time out.
func RulesFor(sp *messages.ServicePort, proxyPort, externalProxyPort int, rejectInternal, rejectExternal bool) ([]PortalRule, error) {
	network, err := Network(sp.GetKey().GetProtocol())
	if err != nil {
		return nil, err
	}
	if externalProxyPort == 0 {
		externalProxyPort = proxyPort
	}
	internal := PortalRule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: proxyPort, Reject: rejectInternal}
	external := PortalRule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: externalProxyPort, Reject: rejectExternal}
	var rules []PortalRule
	for _, set := range []struct {
		ips  *messages.IPSet
		base PortalRule
	}{{sp.GetClusterIps(), internal}, {sp.GetExternalIps(), external}, {sp.GetLoadBalancerIps(), external}} {
		base := set.base
		for _, s := range append(append([]string{}, set.ips.GetV4()...), set.ips.GetV6()...) {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue // the watcher validated IPs; skip rather than fail the port
			}
			r := base
			r.IP, r.Port = ip.Unmap(), int(sp.GetPort())
			rules = append(rules, r)
		}
	}
	if np := sp.GetNodePort(); np != 0 {
		r := external
		r.NodePort, r.Port = true, int(np)
		rules = append(rules, r)
	}
	return rules, nil
}
