package rules

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/kproxy/kproxy/portal/steer"
)

// Rule is one kernel portal: traffic to IP:Port (or to any local
// address on the node port) of Protocol goes to the local listener on
// ProxyPort, or is rejected at once when the service has no endpoints, or
// dropped when it has endpoints but none its traffic policy lets this
// traffic use (kube-proxy's verdicts).
//
// A service port yields one rule per cluster, external and load-balancer IP
// and one for its node port. Rules are identified by Key: an upsert with the
// same key replaces the previous rule.
type Rule struct {
	ServicePort string     // the service port's ID ("ns/name:port/PROTO"): whose rule it is
	Protocol    string     // "tcp" or "udp"
	IP          netip.Addr // service IP (cluster, external or LB); invalid for NodePort rules
	Port        int        // service port, or the node port when NodePort
	NodePort    bool       // match any local destination address (restricted to Options.NodePortAddresses when set)
	ProxyPort   int        // local listener port to redirect to; unused when Reject or Drop
	Reject      bool       // no endpoints: reject new connections at once (TCP reset / ICMP port unreachable)
	Drop        bool       // endpoints, but none for this traffic's policy: drop new connections
	// ClusterIP marks the rules of cluster IPs: traffic to such an IP on a
	// port no rule serves is rejected (the service CIDR catch-all).
	ClusterIP bool
	// ShortCircuitPort, on the external destinations of a service with
	// externalTrafficPolicy Local, is the proxy port serving the cluster's
	// endpoints: traffic from the node itself or from a pod (a source in
	// Options.ClusterCIDRs) goes there, whatever ProxyPort, Reject or Drop
	// say for the rest (kube-proxy's short-circuit of local traffic). 0:
	// none.
	ShortCircuitPort int
	// SourceRanges, on a load-balancer IP, are the only sources a new
	// connection may come from (loadBalancerSourceRanges of the IP's
	// family, canonical, comma-separated); others are dropped. Empty: all.
	SourceRanges string
}

// Ranges parses SourceRanges (validated by Validate).
func (r Rule) Ranges() []netip.Prefix {
	if r.SourceRanges == "" {
		return nil
	}
	var out []netip.Prefix
	for _, s := range strings.Split(r.SourceRanges, ",") {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
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
	switch {
	case r.Reject:
		to = "reject"
	case r.Drop:
		to = "drop"
	}
	if r.ShortCircuitPort != 0 {
		to += fmt.Sprintf(" (local traffic -> :%d)", r.ShortCircuitPort)
	}
	if r.SourceRanges != "" {
		to += " from " + r.SourceRanges
	}
	return fmt.Sprintf("%s %s %s", r.ServicePort, r.Key(), to)
}

// ValidateKey checks what a removal needs: the key.
func (r Rule) ValidateKey() error {
	switch r.Protocol {
	case "tcp", "udp":
	default:
		return fmt.Errorf("portal rule %s: protocol %q: %w", r.ServicePort, r.Protocol, steer.ErrUnsupportedProtocol)
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
	if r.Reject && r.Drop {
		return fmt.Errorf("portal rule %s: both reject and drop", r.ServicePort)
	}
	if !r.Reject && !r.Drop && (r.ProxyPort < 1 || r.ProxyPort > 65535) {
		return fmt.Errorf("portal rule %s: proxy port %d out of range", r.ServicePort, r.ProxyPort)
	}
	if r.ShortCircuitPort < 0 || r.ShortCircuitPort > 65535 {
		return fmt.Errorf("portal rule %s: short-circuit proxy port %d out of range", r.ServicePort, r.ShortCircuitPort)
	}
	if r.ShortCircuitPort != 0 && r.Reject {
		return fmt.Errorf("portal rule %s: a rejecting rule has no short-circuit", r.ServicePort)
	}
	if r.SourceRanges != "" {
		if r.NodePort {
			return fmt.Errorf("portal rule %s: node ports have no source ranges", r.ServicePort)
		}
		for _, s := range strings.Split(r.SourceRanges, ",") {
			p, err := netip.ParsePrefix(s)
			if err != nil || p != p.Masked() || p.Addr().Is4() != r.IP.Unmap().Is4() {
				return fmt.Errorf("portal rule %s: source range %q: want a canonical CIDR of the IP's family", r.ServicePort, s)
			}
		}
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
	if r.Reject || r.Drop {
		r.ProxyPort = 0
	}
	return r
}
