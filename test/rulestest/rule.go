package rulestest

import (
	"net/netip"

	"github.com/kproxy/kproxy/portal/rules"
)

// Rule is a rule of service port sp to proxy port pp; ip "" makes it a
// node-port rule.
func Rule(sp, proto, ip string, port, pp int) rules.Rule {
	r := rules.Rule{ServicePort: sp, Protocol: proto, Port: port, ProxyPort: pp}
	if ip == "" {
		r.NodePort = true
	} else {
		r.IP = netip.MustParseAddr(ip)
	}
	return r
}
