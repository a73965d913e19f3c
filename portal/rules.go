package portal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
)

// Kernel portal modes, next to ModeBind. In ModeNftables and ModeIPTables
// kernel rules redirect service traffic to each service port's proxy-port
// listener; in ModeNetsh the service IPs are added to an interface so that
// listeners can bind them directly (ListenSpecs must then be built as for
// ModeBind).
const (
	ModeNftables = "nftables"
	ModeIPTables = "iptables"
	ModeNetsh    = "netsh"
)

// PortalRule is one kernel portal: traffic to IP:Port (or to any local
// address on the node port) of Protocol goes to the local listener on
// ProxyPort, or is rejected at once when the service has no endpoints.
//
// A service port yields one rule per cluster, external and load-balancer IP
// and one for its node port. Rules are identified by Key: an upsert with the
// same key replaces the previous rule.
type PortalRule struct {
	ServicePort string     // "ns/name:port/PROTO", for comments and debugging only
	Protocol    string     // "tcp" or "udp"
	IP          netip.Addr // service IP (cluster, external or LB); invalid for NodePort rules
	Port        int        // service port, or the node port when NodePort
	NodePort    bool       // match any local destination address (restricted to RulesOptions.NodePortAddresses when set)
	ProxyPort   int        // local listener port to redirect to; unused when Reject
	Reject      bool       // no endpoints: reject new connections at once (TCP reset / ICMP port unreachable)
}

// RuleKey is what a rule matches. Two rules with the same key are the same
// kernel rule.
type RuleKey struct {
	Protocol string
	IP       netip.Addr // invalid for node ports
	Port     int
	NodePort bool
}

// Key returns the rule's identity (the IP unmapped from IPv4-in-IPv6).
func (r PortalRule) Key() RuleKey {
	k := RuleKey{Protocol: r.Protocol, Port: r.Port, NodePort: r.NodePort}
	if !r.NodePort {
		k.IP = r.IP.Unmap()
	}
	return k
}

func (k RuleKey) String() string {
	if k.NodePort {
		return fmt.Sprintf("nodeport:%d/%s", k.Port, k.Protocol)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.IP, uint16(k.Port)), k.Protocol)
}

func (r PortalRule) String() string {
	to := fmt.Sprintf("-> :%d", r.ProxyPort)
	if r.Reject {
		to = "reject"
	}
	return fmt.Sprintf("%s %s %s", r.ServicePort, r.Key(), to)
}

// validateKey checks what a removal needs: the key.
func (r PortalRule) validateKey() error {
	switch r.Protocol {
	case "tcp", "udp":
	default:
		return fmt.Errorf("portal rule %s: protocol %q: %w", r.ServicePort, r.Protocol, ErrUnsupportedProtocol)
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
func (r PortalRule) Validate() error {
	if err := r.validateKey(); err != nil {
		return err
	}
	if !r.Reject && (r.ProxyPort < 1 || r.ProxyPort > 65535) {
		return fmt.Errorf("portal rule %s: proxy port %d out of range", r.ServicePort, r.ProxyPort)
	}
	return nil
}

// Rules programs kernel portal rules. Implementations: Nftables (Linux),
// IPTables (Linux, legacy), Netsh (Windows). Calls are serialised by the
// implementation; a caller (the Rules actor) batches changes and calls
// Apply once per batch.
//
// Implementations remember what they programmed; when Apply fails (for
// example because someone deleted kproxy's rules underneath), the caller
// should check Present and call Sync with the whole desired set.
type Rules interface {
	// Sync replaces everything kproxy owns with exactly rules, in one
	// transaction (full resync: on start, and after someone flushed the
	// table). Duplicate keys with different values are an error.
	Sync(ctx context.Context, rules []PortalRule) error
	// Apply removes removals (only their keys matter; absent ones are
	// ignored) and then adds or replaces upserts, in one transaction. Its
	// cost follows the number of changes, not of services. Upserting a rule
	// identical to the programmed one is a no-op.
	Apply(ctx context.Context, upserts, removals []PortalRule) error
	// Present reports whether kproxy's table, chains and hook rules still
	// exist, so the caller can re-sync after someone flushed them. It does
	// not verify every map element.
	Present(ctx context.Context) (bool, error)
	// Cleanup removes every rule, chain and table kproxy owns (kproxy
	// cleanup, normal shutdown). It succeeds when there is nothing to remove.
	Cleanup(ctx context.Context) error
}

// NewRules returns the Rules of a kernel portal mode: ModeNftables and
// ModeIPTables on Linux, ModeNetsh on Windows. It must run in the network
// namespace the rules are for. ModeBind needs no rules: it returns nil, nil.
func NewRules(ctx context.Context, mode string, o RulesOptions) (Rules, error) {
	switch mode {
	case ModeBind:
		return nil, nil
	case ModeNftables:
		return newNftablesRules(ctx, o)
	case ModeIPTables:
		return NewIPTables(ctx, o)
	case ModeNetsh:
		return newNetshRules(ctx, o)
	default:
		return nil, fmt.Errorf("unknown portal mode %q (want %s, %s, %s or %s)", mode, ModeBind, ModeNftables, ModeIPTables, ModeNetsh)
	}
}

// RulesOptions configure a Rules implementation.
type RulesOptions struct {
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
}

func (o RulesOptions) nodePortPrefixes(v6 bool) (prefixes []netip.Prefix, all bool) {
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

// ErrFamilyUnavailable is returned for a rule of an IP family the backend
// cannot program (for example IPv6 without ip6tables).
var ErrFamilyUnavailable = errors.New("IP family not available")

// ruleSet is what an implementation has programmed, by key.
type ruleSet map[RuleKey]PortalRule

// desiredSet validates rules for Sync and indexes them by key.
func desiredSet(rules []PortalRule) (ruleSet, error) {
	set := make(ruleSet, len(rules))
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		r = normalize(r)
		if old, ok := set[r.Key()]; ok && old != r {
			return nil, fmt.Errorf("portal rules %s and %s have the same key %s", old.ServicePort, r.ServicePort, r.Key())
		}
		set[r.Key()] = r
	}
	return set, nil
}

func normalize(r PortalRule) PortalRule {
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

// plan computes what Apply changes in the kernel: rules to take out (as
// they are programmed now) and rules to put in. Removals come first, then
// upserts; a key in both ends up upserted. It does not modify cur.
func plan(cur ruleSet, upserts, removals []PortalRule) (del, add []PortalRule, err error) {
	want := make(map[RuleKey]*PortalRule, len(upserts)+len(removals))
	for _, r := range removals {
		if err := r.validateKey(); err != nil {
			return nil, nil, err
		}
		want[r.Key()] = nil
	}
	seen := make(map[RuleKey]PortalRule, len(upserts))
	for _, r := range upserts {
		if err := r.Validate(); err != nil {
			return nil, nil, err
		}
		r = normalize(r)
		k := r.Key()
		if old, ok := seen[k]; ok && old != r {
			return nil, nil, fmt.Errorf("portal rules %s and %s have the same key %s", old.ServicePort, r.ServicePort, k)
		}
		seen[k] = r
		want[k] = &r
	}
	for k, w := range want {
		old, had := cur[k]
		switch {
		case w == nil && had:
			del = append(del, old)
		case w != nil && !had:
			add = append(add, *w)
		case w != nil && had && old != *w:
			del = append(del, old)
			add = append(add, *w)
		}
	}
	sortRules(del)
	sortRules(add)
	return del, add, nil
}

// commit records an applied plan.
func (s ruleSet) commit(del, add []PortalRule) {
	for _, r := range del {
		delete(s, r.Key())
	}
	for _, r := range add {
		s[r.Key()] = r
	}
}

func (s ruleSet) sorted() []PortalRule {
	out := make([]PortalRule, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	sortRules(out)
	return out
}

// sortRules orders rules deterministically (generated commands are stable).
func sortRules(rs []PortalRule) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i].Key(), rs[j].Key()
		if a.NodePort != b.NodePort {
			return !a.NodePort
		}
		if c := a.IP.Compare(b.IP); c != 0 {
			return c < 0
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Protocol < b.Protocol
	})
}

// ruleComment makes ServicePort safe for an nftables or iptables comment.
func ruleComment(s string) string {
	const max = 100
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < max; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("/:._-", c) >= 0:
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	return string(b)
}

// execFunc runs a command with stdin (nil for none) and returns its
// standard output; the error carries its standard error.
type execFunc func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)

func runCommand(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
