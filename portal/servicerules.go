package portal

import (
	"net/netip"

	"github.com/kproxy/kproxy/messages"
)

// RulesFor lists the kernel portal rules of one service port: every
// cluster, external and load-balancer IP at the service port, and the node
// port, to proxyPort; or rejects for all of them when the service port has
// no endpoints, so clients fail fast instead of timing out.
func RulesFor(sp *messages.ServicePort, proxyPort int, reject bool) ([]PortalRule, error) {
	network, err := Network(sp.GetKey().GetProtocol())
	if err != nil {
		return nil, err
	}
	base := PortalRule{ServicePort: sp.GetKey().ID(), Protocol: network, ProxyPort: proxyPort, Reject: reject}
	var rules []PortalRule
	for _, set := range []*messages.IPSet{sp.GetClusterIps(), sp.GetExternalIps(), sp.GetLoadBalancerIps()} {
		for _, s := range append(append([]string{}, set.GetV4()...), set.GetV6()...) {
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
		r := base
		r.NodePort, r.Port = true, int(np)
		rules = append(rules, r)
	}
	return rules, nil
}
