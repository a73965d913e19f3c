package rules

import (
	"fmt"
	"net/netip"

	"github.com/kproxy/kproxy/portal"
)

// Rule is one kernel portal: traffic to IP:Port (or to any local
// address on the node port) of Protocol goes to the local listener on
// ProxyPort, or is rejected at once when the service has no endpoints.
//
// A service port yields one rule per cluster, external and load-balancer IP
// and one for its node port. Rules are identified by Key: an upsert with the
// same key replaces the previous rule.
type Rule struct {
	ServicePort string     // "ns/name:port/PROTO", for comments and debugging only
	Protocol    string     // "tcp" or "udp"
	IP          netip.Addr // service IP (cluster, external or LB); invalid for NodePort rules
	Port        int        // service port, or the node port when NodePort
	NodePort    bool       // match any local destination address (restricted to Options.NodePortAddresses when set)
	ProxyPort   int        // local listener port to redirect to; unused when Reject
	Reject      bool       // no endpoints: reject new connections at once (TCP reset / ICMP port unreachable)
}

// Key is what a rule matches. Two rules with the same key are the same
// kernel rule.
type Key struct {
	Protocol string
	IP       netip.Addr // invalid for node ports
	Port     int
	NodePort bool
}

// Key returns the rule's identity (the IP unmapped from IPv4-in-IPv6).
func (r Rule) Key() Key {
	k := Key{Protocol: r.Protocol, Port: r.Port, NodePort: r.NodePort}
	if !r.NodePort {
		k.IP = r.IP.Unmap()
	}
	return k
}

func (k Key) String() string {
	if k.NodePort {
		return fmt.Sprintf("nodeport:%d/%s", k.Port, k.Protocol)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.IP, uint16(k.Port)), k.Protocol)
}

func (r Rule) String() string {
	to := fmt.Sprintf("-> :%d", r.ProxyPort)
	if r.Reject {
		to = "reject"
	}
	return fmt.Sprintf("%s %s %s", r.ServicePort, r.Key(), to)
}

// ValidateKey checks what a removal needs: the key.
func (r Rule) ValidateKey() error {
	switch r.Protocol {
	case "tcp", "udp":
	default:
		return fmt.Errorf("portal rule %s: protocol %q: %w", r.ServicePort, r.Protocol, portal.ErrUnsupportedProtocol)
	}
	if r.Port < 1 || r.Port > 65535 {
		return fmt.Errorf("portal rule %s: port %d out of range", r.ServicePort, r.Port)
	}
	if r.NodePort {
		if r.IP.IsValid() {
			return fmt.Errorf("portal rule %s: a node port rule has no IP (got %s)", r.ServicePort, r.IP)
		}
		return nil
	}
	ip := r.IP.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.Zone() != "" {
		return fmt.Errorf("portal rule %s: invalid service IP %q", r.ServicePort, r.IP)
	}
	return nil
}

// Validate reports whether the rule can be programmed.
func (r Rule) Validate() error {
	if err := r.ValidateKey(); err != nil {
		return err
	}
	if !r.Reject && (r.ProxyPort < 1 || r.ProxyPort > 65535) {
		return fmt.Errorf("portal rule %s: proxy port %d out of range", r.ServicePort, r.ProxyPort)
	}
	return nil
}

// normalize is the form a rule is programmed and compared in.
func normalize(r Rule) Rule {
	if r.NodePort {
		r.IP = netip.Addr{}
	} else {
		r.IP = r.IP.Unmap()
	}
	if r.Reject {
		r.ProxyPort = 0
	}
	return r
}
