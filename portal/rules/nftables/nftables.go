//go:build linux

package nftables

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/knftables"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/policyroute"
	"github.com/kproxy/kproxy/portal/steer"
)

// Table is the table kproxy owns, in family inet.
const Table = "kproxy"

// Object names in the kproxy table.
const (
	nftServiceIPs4        = "service-ips-v4"          // ipv4_addr . inet_proto . inet_service : proxy port
	nftServiceIPs6        = "service-ips-v6"          // ipv6_addr . inet_proto . inet_service : proxy port
	nftServiceNodePorts   = "service-nodeports"       // inet_proto . inet_service : proxy port
	nftNoEndpointIPs4     = "no-endpoint-services-v4" // ... : goto reject-chain
	nftNoEndpointIPs6     = "no-endpoint-services-v6"
	nftNoEndpointNodePort = "no-endpoint-nodeports"
	nftNodePortAddrs4     = "nodeport-addresses-v4" // interval set of NodePortAddresses
	nftNodePortAddrs6     = "nodeport-addresses-v6"
	nftProxyPorts         = "proxy-ports"      // inet_proto . inet_service: what the maps redirect to
	nftShortCircuit4      = "short-circuit-v4" // ... : proxy port serving cluster endpoints, for local traffic
	nftShortCircuit6      = "short-circuit-v6"
	nftShortCircuitNP     = "short-circuit-nodeports"
	nftFirewallIPs4       = "firewall-ips-v4" // ... : goto firewall-<hash> (loadBalancerSourceRanges)
	nftFirewallIPs6       = "firewall-ips-v6"
	nftClusterIPs4        = "cluster-ips-v4" // every cluster IP with a rule
	nftClusterIPs6        = "cluster-ips-v6"

	nftNatPrerouting    = "nat-prerouting"
	nftNatOutput        = "nat-output"
	nftServices         = "services"
	nftServicesOutput   = "services-output"
	nftNodePorts        = "nodeports"
	nftNodePortsOutput  = "nodeports-output"
	nftFilterPrerouting = "filter-prerouting"
	nftFilterInput      = "filter-input"
	nftFilterForward    = "filter-forward"
	nftFilterOutput     = "filter-output"
	nftProxyPortOwner   = "proxy-port-owner"
	nftServiceCheck     = "service-endpoints-check"
	nftNodePortCheck    = "nodeport-endpoints-check"
	nftRejectChain      = "reject-chain"
	nftDropExternal     = "drop-unless-local-traffic"
	nftFirewallCheck    = "firewall-check"
	nftClusterIPsCheck  = "cluster-ips-check"
	nftFilterOutputPost = "filter-output-post-dnat"
	nftFirewallPrefix   = "firewall-"
	nftTransparentOut   = "transparent-output"
	nftTransparentPre   = "transparent-prerouting"
	// nftUnredirected counts what reached a proxy port without kproxy's
	// redirect (and was rejected): kproxy_proxy_port_unredirected_packets_total.
	nftUnredirected = "unredirected-proxy-port-packets"
)

// Chain priorities: the nat chains run at dstnat (-100); the filter chains
// that reject services without endpoints run just before them (-110), so
// they see the original destination. Numbers rather than "dstnat", which
// nft 1.0.6 (Debian 12) refuses for the output hook of an inet table.
const (
	nftNATPriority      = knftables.BaseChainPriority("-100")
	nftFilterPriority   = knftables.BaseChainPriority("-110")
	nftPostDNATPriority = knftables.BaseChainPriority("-90")
	nftManglePriority   = knftables.BaseChainPriority("-150")
)

// Rules programs portal rules in the nftables table "inet kproxy":
//
//   - nat-prerouting (hook prerouting, traffic from other hosts and pods):
//     "redirect to :proxyPort" via the maps service-ips-v4/-v6, keyed by
//     daddr . l4proto . dport, and via service-nodeports (l4proto . dport)
//     for "fib daddr type local" destinations (never loopback, and within
//     NodePortAddresses when set).
//   - nat-output (hook output, traffic from the node itself): the same maps,
//     but "dnat to <source address>:proxyPort" instead of redirect, which
//     would use 127.0.0.1/::1. A locally generated packet's source is always
//     a local address, and keeping it as destination means a wildcard UDP
//     socket's replies leave with the right source address and conntrack
//     reverses the translation. It only sees packets that have a route: the
//     service ranges need a route on the node (a default route will do).
//   - filter-prerouting and filter-output (priority -110, ct state new):
//     no-endpoint-services-v4/-v6 and no-endpoint-nodeports "goto
//     reject-chain", which answers TCP with a reset and UDP with ICMP port
//     unreachable, so clients fail at once. On older kernels that cannot
//     reject in prerouting (New asks), filter-input and filter-forward are used
//     instead (as kube-proxy does); then a non-local service IP is rejected
//     only when the node forwards (net.ipv4.ip_forward=1), else the client
//     gets "no route to host".
//
// Redirect rewrites the destination to the primary address of the
// interface the packet came in on, so the proxy-port listeners must bind
// the unspecified address: "[::]:port" (dual-stack) or, IPv4 only,
// "0.0.0.0:port". A UDP listener's replies must leave from the address the
// datagram was sent to (IP_PKTINFO / IPV6_PKTINFO), or conntrack does not
// reverse the redirect when routing picks another source address.
//
// Rules must be created, and its methods called, in the network
// namespace to program: each call runs the nft binary, which inherits the
// calling thread's namespace.
type Rules struct {
	nft  knftables.Interface
	opts rules.Options
	// routes programs transparent proxying's policy routing (policyroute;
	// a stand-in in tests, which must not touch the host's routing).
	routes policyroute.Routes
	// rejectInPrerouting: the kernel accepts reject in a prerouting chain.
	rejectInPrerouting bool

	mu sync.Mutex
}

var _ rules.Interface = (*Rules)(nil)

// New checks that nft works here and returns the table's manager.
// It does not touch kproxy's table: call Sync. It asks the kernel whether
// reject works in prerouting by committing and deleting a probe table
// (nft --check does not run the kernel's hook validation).
func New(ctx context.Context, o rules.Options) (*Rules, error) {
	nft, err := knftables.New(knftables.InetFamily, Table)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	rejectInPrerouting, err := canReject(ctx, knftables.PreroutingHook)
	if err != nil {
		return nil, err
	}
	r := newRules(nft, o, rejectInPrerouting)
	r.routes = policyroute.Kernel{}
	return r, nil
}

// newRules manages the table through nft (knftables.NewFake in tests),
// with the kernel's answer to the reject probe.
func newRules(nft knftables.Interface, o rules.Options, rejectInPrerouting bool) *Rules {
	return &Rules{nft: nft, opts: o, routes: policyroute.None{}, rejectInPrerouting: rejectInPrerouting}
}

// nftProbeTable holds, for the length of a probe, a base chain with a
// reject rule that can never match (a packet is not both TCP and UDP).
const nftProbeTable = "kproxy-probe"

// canReject reports whether the kernel accepts a reject statement in a
// base chain on hook. It leaves no table behind.
func canReject(ctx context.Context, hook knftables.BaseChainHook) (bool, error) {
	nft, err := knftables.New(knftables.InetFamily, nftProbeTable)
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{}) // a leftover of an interrupted probe
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "probe", Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(hook), Priority: knftables.PtrTo(nftFilterPriority)})
	tx.Add(&knftables.Rule{Chain: "probe", Rule: "meta l4proto tcp meta l4proto udp reject"})
	if nft.Run(ctx, tx) != nil {
		return false, nil // nothing was committed
	}
	tx = nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil {
		return false, fmt.Errorf("nftables: removing probe table: %w", err)
	}
	return true, nil
}

// nodePortMatches returns the rule prefixes selecting node-port
// destinations: external for traffic from other hosts (loopback excluded),
// else for traffic from the node itself.
func (n *Rules) nodePortMatches(external bool) []string {
	var out []string
	for _, fam := range []struct {
		v6               bool
		ip, set, loopbck string
	}{{false, "ip", nftNodePortAddrs4, "127.0.0.0/8"}, {true, "ip6", nftNodePortAddrs6, "::1"}} {
		prefixes, all := n.opts.NodePortPrefixes(fam.v6)
		if !all && len(prefixes) == 0 {
			continue
		}
		m := "fib daddr type local"
		if external {
			m += " " + fam.ip + " daddr != " + fam.loopbck
		}
		if !all {
			m += " " + fam.ip + " daddr @" + fam.set
		}
		out = append(out, m)
	}
	if len(n.opts.NodePortAddresses) == 0 && !external {
		return []string{"fib daddr type local"} // both families in one rule
	}
	return out
}

type nftChain struct {
	name  string
	typ   knftables.BaseChainType
	hook  knftables.BaseChainHook
	prio  knftables.BaseChainPriority
	rules []string
}

// familyMatches lists, per family with prefixes in ps, the match
// "ip saddr { ... }" (dir "saddr" or "daddr").
func familyMatches(ps []netip.Prefix, dir string) []string {
	var out []string
	for _, fam := range []struct {
		v6 bool
		ip string
	}{{false, "ip"}, {true, "ip6"}} {
		var list []string
		for _, p := range rules.Family(ps, fam.v6) {
			list = append(list, p.String())
		}
		if len(list) > 0 {
			out = append(out, fam.ip+" "+dir+" { "+strings.Join(list, ", ")+" }")
		}
	}
	return out
}

// chains is the whole static structure of the table.
func (n *Rules) chains() []nftChain {
	var natPre, natOut, filterPre, filterOut []string
	natPre = append(natPre, "jump "+nftServices)
	natOut = append(natOut, "jump "+nftServicesOutput)
	for _, m := range n.nodePortMatches(true) {
		natPre = append(natPre, m+" jump "+nftNodePorts)
		filterPre = append(filterPre, "ct state new "+m+" jump "+nftNodePortCheck)
	}
	for _, m := range n.nodePortMatches(false) {
		natOut = append(natOut, m+" jump "+nftNodePortsOutput)
		filterOut = append(filterOut, "ct state new "+m+" jump "+nftNodePortCheck)
	}
	firewall := "ct state new jump " + nftFirewallCheck
	serviceCheck := "ct state new jump " + nftServiceCheck
	filterPre = append([]string{serviceCheck}, filterPre...)
	filterOut = append([]string{firewall, serviceCheck}, filterOut...)
	clusterIPsCheck := "ct state new jump " + nftClusterIPsCheck

	l4 := "meta l4proto { tcp, udp } "
	// Local traffic (pods by source, the node always) short-circuits to
	// the cluster's endpoints before the other maps.
	pods := familyMatches(n.opts.ClusterCIDRs, "saddr")
	var services, nodePorts []string
	for _, m := range pods {
		ip := strings.Fields(m)[0]
		set := nftShortCircuit4
		if ip == "ip6" {
			set = nftShortCircuit6
		}
		services = append(services, m+" "+l4+"redirect to : "+ip+" daddr . meta l4proto . th dport map @"+set)
		nodePorts = append(nodePorts, m+" "+l4+"redirect to : meta l4proto . th dport map @"+nftShortCircuitNP)
	}
	dropExternal := []string{}
	for _, m := range pods {
		dropExternal = append(dropExternal, m+" return")
	}
	dropExternal = append(dropExternal, "fib saddr type local return", "drop")
	clusterIPs := []string{
		"ip daddr @" + nftClusterIPs4 + " goto " + nftRejectChain,
		"ip6 daddr @" + nftClusterIPs6 + " goto " + nftRejectChain,
	}
	for _, m := range familyMatches(n.opts.ServiceCIDRs, "daddr") {
		clusterIPs = append(clusterIPs, m+" drop")
	}
	cs := []nftChain{
		{name: nftNatPrerouting, typ: knftables.NATType, hook: knftables.PreroutingHook, prio: nftNATPriority, rules: natPre},
		{name: nftNatOutput, typ: knftables.NATType, hook: knftables.OutputHook, prio: nftNATPriority, rules: natOut},
		{name: nftServices, rules: append(services,
			l4+"redirect to : ip daddr . meta l4proto . th dport map @"+nftServiceIPs4,
			l4+"redirect to : ip6 daddr . meta l4proto . th dport map @"+nftServiceIPs6,
		)},
		{name: nftServicesOutput, rules: []string{
			l4 + "dnat ip to ip saddr : ip daddr . meta l4proto . th dport map @" + nftShortCircuit4,
			l4 + "dnat ip6 to ip6 saddr : ip6 daddr . meta l4proto . th dport map @" + nftShortCircuit6,
			l4 + "dnat ip to ip saddr : ip daddr . meta l4proto . th dport map @" + nftServiceIPs4,
			l4 + "dnat ip6 to ip6 saddr : ip6 daddr . meta l4proto . th dport map @" + nftServiceIPs6,
		}},
		{name: nftNodePorts, rules: append(nodePorts,
			l4+"redirect to : meta l4proto . th dport map @"+nftServiceNodePorts,
		)},
		{name: nftNodePortsOutput, rules: []string{
			l4 + "meta nfproto ipv4 dnat ip to ip saddr : meta l4proto . th dport map @" + nftShortCircuitNP,
			l4 + "meta nfproto ipv6 dnat ip6 to ip6 saddr : meta l4proto . th dport map @" + nftShortCircuitNP,
			l4 + "meta nfproto ipv4 dnat ip to ip saddr : meta l4proto . th dport map @" + nftServiceNodePorts,
			l4 + "meta nfproto ipv6 dnat ip6 to ip6 saddr : meta l4proto . th dport map @" + nftServiceNodePorts,
		}},
		{name: nftServiceCheck, rules: []string{
			"ip daddr . meta l4proto . th dport vmap @" + nftNoEndpointIPs4,
			"ip6 daddr . meta l4proto . th dport vmap @" + nftNoEndpointIPs6,
		}},
		{name: nftNodePortCheck, rules: []string{
			"meta l4proto . th dport vmap @" + nftNoEndpointNodePort,
		}},
		{name: nftRejectChain, rules: []string{
			"meta l4proto tcp reject with tcp reset",
			"reject",
		}},
		{name: nftDropExternal, rules: dropExternal},
		{name: nftFirewallCheck, rules: []string{
			"ip daddr . meta l4proto . th dport vmap @" + nftFirewallIPs4,
			"ip6 daddr . meta l4proto . th dport vmap @" + nftFirewallIPs6,
		}},
		{name: nftClusterIPsCheck, rules: clusterIPs},
		{name: nftFilterOutput, typ: knftables.FilterType, hook: knftables.OutputHook, prio: nftFilterPriority, rules: filterOut},
		{name: nftFilterOutputPost, typ: knftables.FilterType, hook: knftables.OutputHook, prio: nftPostDNATPriority, rules: []string{clusterIPsCheck}},
		// Redirected traffic reaches only kproxy's own sockets (SO_MARK,
		// which needs CAP_NET_ADMIN): while kproxy is down (a crash, a
		// restart) a process binding a proxy port gets nothing. And
		// kproxy's sockets get only redirected traffic: they bind the
		// unspecified address (redirect needs it), so a connection from
		// another host, a pod or a local process dialling a proxy port
		// itself would be served past every policy and source range. It
		// gets what a closed port gives. The socket lookup finds the
		// listener for a new connection (a TCP request socket has no mark
		// and is not matched: its handshake's last packet is not new).
		{name: nftProxyPortOwner, typ: knftables.FilterType, hook: knftables.InputHook, prio: knftables.FilterPriority, rules: []string{
			fmt.Sprintf("ct status dnat meta l4proto . th dport @%s socket mark != 0x%08x drop", nftProxyPorts, steer.SocketMark),
			fmt.Sprintf("ct state new ct status & dnat == 0 socket mark 0x%08x counter name %s goto %s", steer.SocketMark, nftUnredirected, nftRejectChain),
		}},
		// Transparent proxying: a connection kproxy dialled from a
		// client's address (its socket carries TransparentMark) keeps the
		// mark in conntrack, and its replies get TransparentReplyMark
		// before routing, which sends them to kproxy's socket
		// (policyroute), not on to the client.
		{name: nftTransparentOut, typ: knftables.FilterType, hook: knftables.OutputHook, prio: nftManglePriority, rules: []string{
			fmt.Sprintf("meta mark & 0x%08[1]x != 0x00000000 ct mark set ct mark | 0x%08[1]x", steer.TransparentMark),
		}},
		{name: nftTransparentPre, typ: knftables.FilterType, hook: knftables.PreroutingHook, prio: nftManglePriority, rules: []string{
			fmt.Sprintf("ct direction reply ct mark & 0x%08x != 0x00000000 meta mark set meta mark | 0x%08x", steer.TransparentMark, steer.TransparentReplyMark),
		}},
	}
	if n.rejectInPrerouting {
		cs = append(cs,
			nftChain{name: nftFilterPrerouting, typ: knftables.FilterType, hook: knftables.PreroutingHook, prio: nftFilterPriority, rules: append([]string{firewall}, filterPre...)},
			nftChain{name: nftFilterForward, typ: knftables.FilterType, hook: knftables.ForwardHook, prio: nftFilterPriority, rules: []string{clusterIPsCheck}})
	} else {
		// Older kernels: reject after routing, as kube-proxy does; the
		// firewall only drops, which prerouting allows.
		cs = append(cs,
			nftChain{name: nftFilterPrerouting, typ: knftables.FilterType, hook: knftables.PreroutingHook, prio: nftFilterPriority, rules: []string{firewall}},
			nftChain{name: nftFilterInput, typ: knftables.FilterType, hook: knftables.InputHook, prio: nftFilterPriority, rules: filterPre},
			nftChain{name: nftFilterForward, typ: knftables.FilterType, hook: knftables.ForwardHook, prio: nftFilterPriority, rules: []string{serviceCheck, clusterIPsCheck}})
	}
	return cs
}

// proxyPortsSet is the set of proxy ports the maps redirect to.
func proxyPortsSet() *knftables.Set {
	return &knftables.Set{Name: nftProxyPorts, Type: "inet_proto . inet_service", Comment: knftables.PtrTo("proxy ports: redirected traffic reaches only kproxy's sockets")}
}

// unredirectedCounter counts packets rejected at a proxy port because no
// kproxy rule redirected them there.
func unredirectedCounter() *knftables.Counter {
	return &knftables.Counter{Name: nftUnredirected, Comment: knftables.PtrTo("new connections to a proxy port that kproxy did not redirect there, rejected")}
}

// UnredirectedPackets is how many packets reached a proxy port without
// kproxy's redirect, and were rejected, since the table was created.
func (n *Rules) UnredirectedPackets(ctx context.Context) (uint64, error) {
	cs, err := n.nft.ListCounters(ctx)
	if err != nil {
		return 0, fmt.Errorf("nftables: %w", err)
	}
	for _, c := range cs {
		if c.Name == nftUnredirected && c.Packets != nil {
			return *c.Packets, nil
		}
	}
	return 0, fmt.Errorf("nftables: counter %s not found", nftUnredirected)
}

func clusterIPElement(ip netip.Addr) *knftables.Element {
	set := nftClusterIPs4
	if ip.Is6() {
		set = nftClusterIPs6
	}
	return &knftables.Element{Set: set, Key: []string{ip.String()}}
}

// clusterIPsSets hold every cluster IP with a rule.
func clusterIPsSets() []*knftables.Set {
	return []*knftables.Set{
		{Name: nftClusterIPs4, Type: "ipv4_addr", Comment: knftables.PtrTo("IPv4 cluster IPs: other ports are rejected")},
		{Name: nftClusterIPs6, Type: "ipv6_addr", Comment: knftables.PtrTo("IPv6 cluster IPs: other ports are rejected")},
	}
}

func proxyPortElement(key string) *knftables.Element {
	proto, port, _ := strings.Cut(key, "/")
	return &knftables.Element{Set: nftProxyPorts, Key: []string{proto, port}}
}

// useElement is the set element of a cluster IP or proxy port the rules
// share.
func useElement(u rules.Use) *knftables.Element {
	if u.Kind == rules.UseClusterIP {
		return clusterIPElement(u.IP)
	}
	return proxyPortElement(u.Protocol + "/" + strconv.Itoa(u.Port))
}

func (n *Rules) maps() []*knftables.Map {
	const v4, v6, np = "ipv4_addr . inet_proto . inet_service", "ipv6_addr . inet_proto . inet_service", "inet_proto . inet_service"
	return []*knftables.Map{
		{Name: nftServiceIPs4, Type: v4 + " : inet_service", Comment: knftables.PtrTo("IPv4 ClusterIP, ExternalIP and LoadBalancer IP -> proxy port")},
		{Name: nftServiceIPs6, Type: v6 + " : inet_service", Comment: knftables.PtrTo("IPv6 ClusterIP, ExternalIP and LoadBalancer IP -> proxy port")},
		{Name: nftServiceNodePorts, Type: np + " : inet_service", Comment: knftables.PtrTo("NodePort -> proxy port")},
		{Name: nftNoEndpointIPs4, Type: v4 + " : verdict", Comment: knftables.PtrTo("IPv4 service IPs without endpoints")},
		{Name: nftNoEndpointIPs6, Type: v6 + " : verdict", Comment: knftables.PtrTo("IPv6 service IPs without endpoints")},
		{Name: nftNoEndpointNodePort, Type: np + " : verdict", Comment: knftables.PtrTo("NodePorts without endpoints")},
		{Name: nftShortCircuit4, Type: v4 + " : inet_service", Comment: knftables.PtrTo("IPv4 ExternalIP and LoadBalancer IP of externalTrafficPolicy Local -> proxy port of the cluster's endpoints, for local traffic")},
		{Name: nftShortCircuit6, Type: v6 + " : inet_service", Comment: knftables.PtrTo("IPv6 ExternalIP and LoadBalancer IP of externalTrafficPolicy Local -> proxy port of the cluster's endpoints, for local traffic")},
		{Name: nftShortCircuitNP, Type: np + " : inet_service", Comment: knftables.PtrTo("NodePort of externalTrafficPolicy Local -> proxy port of the cluster's endpoints, for local traffic")},
		{Name: nftFirewallIPs4, Type: v4 + " : verdict", Comment: knftables.PtrTo("IPv4 LoadBalancer IPs with loadBalancerSourceRanges")},
		{Name: nftFirewallIPs6, Type: v6 + " : verdict", Comment: knftables.PtrTo("IPv6 LoadBalancer IPs with loadBalancerSourceRanges")},
	}
}

// sets returns the NodePortAddresses sets and their elements.
func (n *Rules) sets() ([]*knftables.Set, []*knftables.Element) {
	var sets []*knftables.Set
	var elems []*knftables.Element
	if len(n.opts.NodePortAddresses) == 0 {
		return nil, nil
	}
	for _, fam := range []struct {
		v6       bool
		name, ty string
	}{{false, nftNodePortAddrs4, "ipv4_addr"}, {true, nftNodePortAddrs6, "ipv6_addr"}} {
		prefixes, _ := n.opts.NodePortPrefixes(fam.v6)
		if len(prefixes) == 0 {
			continue
		}
		sets = append(sets, &knftables.Set{Name: fam.name, Type: fam.ty, Flags: []knftables.SetFlag{knftables.IntervalFlag}, Comment: knftables.PtrTo("NodePortAddresses")})
		for _, p := range rules.MergePrefixes(prefixes) {
			elems = append(elems, &knftables.Element{Set: fam.name, Key: []string{p.String()}})
		}
	}
	return sets, elems
}

// element is a rule's map element; value is omitted for deletes.
func (n *Rules) element(r rules.Rule, withValue bool) (*knftables.Element, error) {
	e := &knftables.Element{}
	switch {
	case r.NodePort:
		e.Key = []string{r.Protocol, strconv.Itoa(r.Port)}
		e.Map = nftServiceNodePorts
		if r.Reject || r.Drop {
			e.Map = nftNoEndpointNodePort
		}
	case r.IP.Is4():
		e.Key = []string{r.IP.String(), r.Protocol, strconv.Itoa(r.Port)}
		e.Map = nftServiceIPs4
		if r.Reject || r.Drop {
			e.Map = nftNoEndpointIPs4
		}
	case r.IP.Is6():
		e.Key = []string{r.IP.String(), r.Protocol, strconv.Itoa(r.Port)}
		e.Map = nftServiceIPs6
		if r.Reject || r.Drop {
			e.Map = nftNoEndpointIPs6
		}
	default:
		return nil, fmt.Errorf("portal rule %s: %w", r, rules.ErrFamilyUnavailable)
	}
	if withValue {
		switch {
		case r.Reject:
			e.Value = []string{"goto " + nftRejectChain}
		case r.Drop && r.ShortCircuitPort != 0:
			e.Value = []string{"goto " + nftDropExternal}
		case r.Drop:
			e.Value = []string{"drop"}
		default:
			e.Value = []string{strconv.Itoa(r.ProxyPort)}
		}
		e.Comment = comment(r)
	}
	return e, nil
}

func comment(r rules.Rule) *string {
	if c := rules.Comment(r.ServicePort); c != "" {
		return &c
	}
	return nil
}

// firewallChain names the chain holding a rule's source ranges.
func firewallChain(r rules.Rule) string {
	sum := sha256.Sum256([]byte(r.Key().String()))
	return nftFirewallPrefix + strings.ToLower(base32.StdEncoding.EncodeToString(sum[:])[:16])
}

// firewallRule is the one rule of a rule's firewall chain.
func (n *Rules) firewallRule(r rules.Rule) string {
	ip := "ip"
	if r.IP.Is6() {
		ip = "ip6"
	}
	var list []string
	for _, p := range n.opts.FirewallSources(r) {
		list = append(list, p.String())
	}
	return ip + " saddr != { " + strings.Join(list, ", ") + " } drop"
}

// extras are a rule's elements besides its map element: its short-circuit
// port and its firewall entry (values omitted for deletes).
func extras(r rules.Rule, withValue bool) []*knftables.Element {
	var out []*knftables.Element
	key := []string{r.IP.String(), r.Protocol, strconv.Itoa(r.Port)}
	if r.NodePort {
		key = key[1:]
	}
	if r.ShortCircuitPort != 0 {
		e := &knftables.Element{Map: nftShortCircuit4, Key: key}
		switch {
		case r.NodePort:
			e.Map = nftShortCircuitNP
		case r.IP.Is6():
			e.Map = nftShortCircuit6
		}
		if withValue {
			e.Value, e.Comment = []string{strconv.Itoa(r.ShortCircuitPort)}, comment(r)
		}
		out = append(out, e)
	}
	if r.SourceRanges != "" {
		e := &knftables.Element{Map: nftFirewallIPs4, Key: key}
		if r.IP.Is6() {
			e.Map = nftFirewallIPs6
		}
		if withValue {
			e.Value, e.Comment = []string{"goto " + firewallChain(r)}, comment(r)
		}
		out = append(out, e)
	}
	return out
}

// addRule adds to tx what programs r: its firewall chain, its elements.
func (n *Rules) addRule(tx *knftables.Transaction, r rules.Rule) error {
	e, err := n.element(r, true)
	if err != nil {
		return err
	}
	if r.SourceRanges != "" {
		ch := &knftables.Chain{Name: firewallChain(r), Comment: comment(r)}
		tx.Add(ch)
		tx.Flush(ch)
		tx.Add(&knftables.Rule{Chain: ch.Name, Rule: n.firewallRule(r)})
	}
	tx.Add(e)
	for _, x := range extras(r, true) {
		tx.Add(x)
	}
	return nil
}

// deleteRule adds to tx what removes r; keepChain when the same key
// comes back with source ranges in the same transaction.
func (n *Rules) deleteRule(tx *knftables.Transaction, r rules.Rule, keepChain bool) error {
	e, err := n.element(r, false)
	if err != nil {
		return err
	}
	tx.Delete(e)
	for _, x := range extras(r, false) {
		tx.Delete(x)
	}
	if r.SourceRanges != "" && !keepChain {
		tx.Delete(&knftables.Chain{Name: firewallChain(r)})
	}
	return nil
}

// Sync deletes and recreates the table with exactly want, in one
// transaction: packets see the old table or the new one, never none.
func (n *Rules) Sync(ctx context.Context, want rules.Set) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	tx := n.nft.NewTransaction()
	table := &knftables.Table{Comment: knftables.PtrTo("kproxy portal rules")}
	tx.Add(table) // so that the delete below cannot fail
	tx.Delete(&knftables.Table{})
	tx.Add(table)
	sets, setElems := n.sets()
	for _, s := range sets {
		tx.Add(s)
	}
	for _, m := range n.maps() {
		tx.Add(m)
	}
	tx.Add(proxyPortsSet())
	tx.Add(unredirectedCounter())
	for _, s := range clusterIPsSets() {
		tx.Add(s)
	}
	chains := n.chains()
	for _, c := range chains {
		ch := &knftables.Chain{Name: c.name}
		if c.hook != "" {
			ch.Type, ch.Hook, ch.Priority = knftables.PtrTo(c.typ), knftables.PtrTo(c.hook), knftables.PtrTo(c.prio)
		}
		tx.Add(ch)
	}
	// Rules after every chain exists (jumps need their target).
	for _, c := range chains {
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: r})
		}
	}
	for _, e := range setElems {
		tx.Add(e)
	}
	for _, r := range want.Sorted() {
		if err := n.addRule(tx, r); err != nil {
			return err
		}
	}
	for _, kind := range []rules.UseKind{rules.UseProxyPort, rules.UseClusterIP} {
		for _, u := range want.InUse(kind) {
			tx.Add(useElement(u))
		}
	}
	if err := n.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables sync of %d rules: %w", len(want), err)
	}
	return n.routes.Ensure()
}

// Apply deletes and adds map elements in one transaction, and the
// elements of the cluster IP and proxy port sets that the change starts or
// stops using (looked up in cur, not counted).
func (n *Rules) Apply(ctx context.Context, cur *rules.Programmed, del, add []rules.Rule) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(del) == 0 && len(add) == 0 {
		return nil
	}
	tx := n.nft.NewTransaction()
	readded := map[rules.Key]bool{}
	for _, r := range add {
		readded[r.Key()] = r.SourceRanges != ""
	}
	for _, r := range del {
		if err := n.deleteRule(tx, r, readded[r.Key()]); err != nil {
			return err
		}
	}
	for _, r := range add {
		if err := n.addRule(tx, r); err != nil {
			return err
		}
	}
	started, stopped := cur.UseChanges(del, add)
	for _, kind := range []rules.UseKind{rules.UseClusterIP, rules.UseProxyPort} {
		for _, u := range stopped {
			if u.Kind == kind {
				tx.Delete(useElement(u))
			}
		}
		for _, u := range started {
			if u.Kind == kind {
				tx.Add(useElement(u))
			}
		}
	}
	if err := n.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables apply of %d changes: %w", len(del)+len(add), err)
	}
	return nil
}

// Present reports whether the table exists with every chain, map and set
// and the expected number of rules in each chain (cur lives in map
// elements, which it does not count).
func (n *Rules) Present(ctx context.Context, _ rules.Set) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	objs, err := n.nft.ListAll(ctx)
	if knftables.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	has := func(kind, name string) bool {
		for _, o := range objs[kind] {
			if o == name {
				return true
			}
		}
		return false
	}
	for _, m := range n.maps() {
		if !has("map", m.Name) {
			return false, nil
		}
	}
	sets, _ := n.sets()
	for _, s := range append(append(sets, proxyPortsSet()), clusterIPsSets()...) {
		if !has("set", s.Name) {
			return false, nil
		}
	}
	chains := n.chains()
	for _, c := range chains {
		if !has("chain", c.name) {
			return false, nil
		}
	}
	rules, err := n.nft.ListRules(ctx, "")
	if knftables.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	count := map[string]int{}
	for _, r := range rules {
		count[r.Chain]++
	}
	for _, c := range chains {
		if count[c.name] != len(c.rules) {
			return false, nil
		}
	}
	return n.routes.Present()
}

// Cleanup deletes the kproxy table.
func (n *Rules) Cleanup(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	tx := n.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := n.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables cleanup: %w", err)
	}
	return n.routes.Remove()
}
