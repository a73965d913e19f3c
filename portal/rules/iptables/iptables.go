package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/portal/rules/policyroute"
	"github.com/kproxy/kproxy/portal/steer"
)

// Chains of the iptables portal, kube-proxy userspace mode's names.
const (
	iptPortalsContainer  = "KUBE-PORTALS-CONTAINER"  // nat, from PREROUTING: service IPs, traffic from other hosts and pods
	iptPortalsHost       = "KUBE-PORTALS-HOST"       // nat, from OUTPUT: service IPs, traffic from the node
	iptNodePortContainer = "KUBE-NODEPORT-CONTAINER" // nat, from PREROUTING for local destinations
	iptNodePortHost      = "KUBE-NODEPORT-HOST"      // nat, from OUTPUT for local destinations
	iptPortalsReject     = "KUBE-PORTALS-REJECT"     // filter, from INPUT, FORWARD, OUTPUT: service IPs without endpoints
	iptNodePortReject    = "KUBE-NODEPORT-REJECT"    // filter, from INPUT, OUTPUT: node ports without endpoints
	iptProxyPortOwner    = "KPROXY-PROXY-PORT-OWNER" // filter, from INPUT for redirected traffic: kproxy's sockets only
	iptProxyPorts        = "KPROXY-PROXY-PORTS"      // filter, from INPUT for new traffic not redirected: not to kproxy's sockets
	iptUnredirected      = "KPROXY-UNREDIRECTED"     // filter, from KPROXY-PROXY-PORTS: rejects, and counts
	iptFirewall          = "KPROXY-FIREWALL"         // mangle, from PREROUTING, OUTPUT: loadBalancerSourceRanges
	iptClusterIPs        = "KPROXY-CLUSTER-IPS"      // filter, from FORWARD, OUTPUT: unserved ports of cluster IPs
	iptServiceCIDRs      = "KPROXY-SERVICE-CIDRS"    // filter, from FORWARD, OUTPUT: unallocated service IPs
	iptTransparent       = "KPROXY-TRANSPARENT"      // mangle, from PREROUTING, OUTPUT: transparent proxying's marks
)

var iptChains = map[string][]string{
	"nat":    {iptPortalsContainer, iptPortalsHost, iptNodePortContainer, iptNodePortHost},
	"filter": {iptPortalsReject, iptNodePortReject, iptProxyPortOwner, iptProxyPorts, iptUnredirected, iptClusterIPs, iptServiceCIDRs},
	"mangle": {iptFirewall, iptTransparent},
}

var iptTables = []string{"mangle", "nat", "filter"}

// Rules programs portal rules with iptables and ip6tables, as kube-proxy's
// userspace mode did: in the nat table, KUBE-PORTALS-CONTAINER and
// KUBE-NODEPORT-CONTAINER (from PREROUTING) REDIRECT to the proxy port,
// KUBE-PORTALS-HOST and KUBE-NODEPORT-HOST (from OUTPUT) REDIRECT too,
// which in OUTPUT means 127.0.0.1 or ::1. In the filter table,
// KUBE-PORTALS-REJECT (from INPUT, FORWARD and OUTPUT) and
// KUBE-NODEPORT-REJECT (from INPUT and OUTPUT) reject new connections to
// service ports without endpoints (TCP reset, ICMP port unreachable), and
// KPROXY-PROXY-PORT-OWNER (from INPUT, for redirected traffic) drops what
// reaches a proxy port whose socket lacks steer.SocketMark: the rules
// stay in place while kproxy is down, and no other process that binds a
// proxy port meanwhile may receive service traffic. Per proxy-port rule it
// restores the socket's mark into the packet (the socket match) and drops
// the packet unless the mark is kproxy's.
//
// Services that have endpoints, but none their traffic policy allows, are
// dropped in the same chains (kube-proxy's verdict). The external
// destinations of a service with externalTrafficPolicy Local redirect the
// node's own traffic (KUBE-*-HOST) and traffic from Options.ClusterCIDRs to
// the proxy port serving the cluster's endpoints (kube-proxy's
// short-circuit); the filter chains see it redirected, so a drop does not
// catch it. KPROXY-FIREWALL, in the mangle table before any NAT, drops new
// connections to a load-balancer IP from outside its
// loadBalancerSourceRanges. KPROXY-CLUSTER-IPS (after NAT, from FORWARD and
// OUTPUT) rejects what is still addressed to a cluster IP, a port no rule
// serves, and KPROXY-SERVICE-CIDRS then drops what is addressed to the
// rest of Options.ServiceCIDRs, so it never leaves by the default route.
//
// REJECT only works after routing: a non-local service IP without endpoints
// is rejected when the node forwards (net.ipv4.ip_forward=1, as on any
// Kubernetes node); otherwise the client gets "no route to host".
//
// Listeners must bind the unspecified address ("[::]:port" or
// "0.0.0.0:port"), and a UDP listener must answer from the address each
// datagram was sent to (IP_PKTINFO / IPV6_PKTINFO): after REDIRECT in
// OUTPUT that is 127.0.0.1 while routing would pick the node's address.
//
// Every Sync, Apply and Cleanup is one iptables-restore --noflush per IP
// family (a COMMIT per table). iptables-restore rewrites the whole table,
// so its cost grows with the table's size, unlike nftables.
type Rules struct {
	opts rules.Options
	run  rules.Exec
	// routes programs transparent proxying's policy routing.
	routes policyroute.Routes
	fams   []*iptFamily
	mu     sync.Mutex
}

var _ rules.Interface = (*Rules)(nil)

type iptFamily struct {
	v6              bool
	save, restore   string
	hostBits        string // "/32" or "/128"
	loopback        string
	icmpUnreachable string
}

func (f *iptFamily) String() string {
	if f.v6 {
		return "ip6tables"
	}
	return "iptables"
}

// New checks that iptables works (and ip6tables, which is optional:
// without it IPv6 rules are refused with rules.ErrFamilyUnavailable). It does not
// touch the rules: call Sync. Like Nftables, it must be used in the network
// namespace to program.
func New(ctx context.Context, o rules.Options) (*Rules, error) {
	t, err := newRules(ctx, o, rules.RunCommand)
	if err != nil {
		return nil, err
	}
	t.routes = policyroute.Kernel{}
	return t, nil
}

func newRules(ctx context.Context, o rules.Options, run rules.Exec) (*Rules, error) {
	t := &Rules{opts: o, run: run, routes: policyroute.None{}}
	for _, f := range []*iptFamily{
		{v6: false, save: "iptables-save", restore: "iptables-restore", hostBits: "/32", loopback: "127.0.0.0/8", icmpUnreachable: "icmp-port-unreachable"},
		{v6: true, save: "ip6tables-save", restore: "ip6tables-restore", hostBits: "/128", loopback: "::1/128", icmpUnreachable: "icmp6-port-unreachable"},
	} {
		if _, err := t.run(ctx, nil, f.save, "-t", "nat"); err != nil {
			if !f.v6 {
				return nil, fmt.Errorf("iptables: %w", err)
			}
			continue
		}
		t.fams = append(t.fams, f)
	}
	return t, nil
}

// IPv6 reports whether ip6tables is available.
func (t *Rules) IPv6() bool {
	for _, f := range t.fams {
		if f.v6 {
			return true
		}
	}
	return false
}

type iptJump struct {
	table, chain, spec string
}

// jumps returns the rules in built-in chains that lead to kproxy's chains,
// in order.
func (t *Rules) jumps(f *iptFamily) []iptJump {
	var nodePortMatches []string
	prefixes, all := t.opts.NodePortPrefixes(f.v6)
	if all {
		nodePortMatches = []string{"-m addrtype --dst-type LOCAL"}
	}
	for _, p := range prefixes {
		nodePortMatches = append(nodePortMatches, "-m addrtype --dst-type LOCAL -d "+p.String())
	}
	const newConn = "-m conntrack --ctstate NEW "
	js := []iptJump{
		{"nat", "PREROUTING", `-m comment --comment "kproxy service portals" -j ` + iptPortalsContainer},
		{"nat", "OUTPUT", `-m comment --comment "kproxy service portals" -j ` + iptPortalsHost},
		{"filter", "INPUT", newConn + `-m comment --comment "kproxy services without endpoints" -j ` + iptPortalsReject},
		{"filter", "FORWARD", newConn + `-m comment --comment "kproxy services without endpoints" -j ` + iptPortalsReject},
		{"filter", "OUTPUT", newConn + `-m comment --comment "kproxy services without endpoints" -j ` + iptPortalsReject},
		{"filter", "INPUT", `-m conntrack --ctstate DNAT -m comment --comment "kproxy proxy ports: kproxy's sockets only" -j ` + iptProxyPortOwner},
		{"filter", "INPUT", newConn + `-m conntrack ! --ctstate DNAT -m comment --comment "kproxy proxy ports: redirected traffic only" -j ` + iptProxyPorts},
		{"mangle", "PREROUTING", newConn + `-m comment --comment "kproxy loadBalancerSourceRanges" -j ` + iptFirewall},
		{"mangle", "OUTPUT", newConn + `-m comment --comment "kproxy loadBalancerSourceRanges" -j ` + iptFirewall},
		{"mangle", "PREROUTING", `-m comment --comment "kproxy transparent proxying" -j ` + iptTransparent},
		{"mangle", "OUTPUT", `-m comment --comment "kproxy transparent proxying" -j ` + iptTransparent},
	}
	for _, m := range nodePortMatches {
		js = append(js,
			iptJump{"nat", "PREROUTING", m + ` -m comment --comment "kproxy node ports" -j ` + iptNodePortContainer},
			iptJump{"nat", "OUTPUT", m + ` -m comment --comment "kproxy node ports" -j ` + iptNodePortHost},
			iptJump{"filter", "INPUT", newConn + m + ` -m comment --comment "kproxy node ports without endpoints" -j ` + iptNodePortReject},
			iptJump{"filter", "OUTPUT", newConn + m + ` -m comment --comment "kproxy node ports without endpoints" -j ` + iptNodePortReject},
		)
	}
	for _, chain := range []string{"FORWARD", "OUTPUT"} {
		js = append(js,
			iptJump{"filter", chain, newConn + `-m comment --comment "kproxy unserved ports of cluster IPs" -j ` + iptClusterIPs},
			iptJump{"filter", chain, newConn + `-m comment --comment "kproxy unallocated service IPs" -j ` + iptServiceCIDRs})
	}
	return js
}

// staticRules are the first rules of kproxy's own chains.
func (t *Rules) staticRules(f *iptFamily) []iptJump {
	// Loopback is a node-port destination from the node only.
	out := []iptJump{{"nat", iptNodePortContainer, "-d " + f.loopback + " -j RETURN"},
		// Transparent proxying: a connection kproxy dialled from a
		// client's address (its socket carries TransparentMark) keeps the
		// mark in conntrack, and its replies get TransparentReplyMark
		// before routing, which sends them to kproxy's socket
		// (policyroute), not on to the client.
		{"mangle", iptTransparent, fmt.Sprintf("-m mark --mark 0x%[1]x/0x%[1]x -j CONNMARK --set-xmark 0x%[1]x/0x%[1]x", steer.TransparentMark)},
		{"mangle", iptTransparent, fmt.Sprintf("-m conntrack --ctdir REPLY -m connmark --mark 0x%[1]x/0x%[1]x -j MARK --set-xmark 0x%[2]x/0x%[2]x", steer.TransparentMark, steer.TransparentReplyMark)},
	}
	for _, p := range rules.Family(t.opts.ServiceCIDRs, f.v6) {
		out = append(out, iptJump{"filter", iptServiceCIDRs, "-d " + p.String() + " -j DROP"})
	}
	// kproxy's sockets get only redirected traffic: they bind the
	// unspecified address (REDIRECT needs it), so a connection from
	// another host, a pod or a local process dialling a proxy port itself
	// would be served past every policy and source range. It gets what a
	// closed port gives. iptables reads a socket's mark only by copying it
	// into the packet (--restore-skmark), so the lookup is confined to
	// the ports proxy ports come from.
	first, last := t.opts.ProxyPortSpan()
	for _, proto := range []string{"tcp", "udp"} {
		ports := fmt.Sprintf("-p %[1]s -m %[1]s --dport %d:%d", proto, first, last)
		out = append(out,
			iptJump{"filter", iptProxyPorts, ports + " -m socket --nowildcard --restore-skmark"},
			iptJump{"filter", iptProxyPorts, fmt.Sprintf("%s -m mark --mark 0x%x/0x%x -j %s", ports, steer.SocketMark, steer.SocketMark, iptUnredirected)})
	}
	return append(out,
		iptJump{"filter", iptUnredirected, "-p tcp -j REJECT --reject-with tcp-reset"},
		iptJump{"filter", iptUnredirected, "-j REJECT --reject-with " + f.icmpUnreachable})
}

// UnredirectedPackets is how many packets reached a proxy port without
// kproxy's redirect, and were rejected, since the last Sync: the counters
// of KPROXY-UNREDIRECTED's rules, in every family.
func (t *Rules) UnredirectedPackets(ctx context.Context) (uint64, error) {
	var n uint64
	for _, f := range t.fams {
		out, err := t.run(ctx, nil, f.save, "-c", "-t", "filter")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// "[packets:bytes] -A KPROXY-UNREDIRECTED ..."
			counts, rule, ok := strings.Cut(line, " ")
			if !ok || !strings.HasPrefix(rule, "-A "+iptUnredirected+" ") || !strings.HasPrefix(counts, "[") {
				continue
			}
			packets, _, _ := strings.Cut(strings.TrimPrefix(counts, "["), ":")
			v, err := strconv.ParseUint(packets, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: counters of %q: %w", f, line, err)
			}
			n += v
		}
	}
	return n, nil
}

// ruleLines are the rules of one portal rule in family f.
func (t *Rules) ruleLines(f *iptFamily, r rules.Rule) []iptJump {
	dst := fmt.Sprintf("-p %s -m %s --dport %d", r.Protocol, r.Protocol, r.Port)
	if !r.NodePort {
		dst = "-d " + r.IP.String() + f.hostBits + " " + dst
	}
	match := dst
	if c := rules.Comment(r.ServicePort); c != "" {
		match += ` -m comment --comment "` + c + `"`
	}
	var out []iptJump
	// Source ranges first: a packet from elsewhere goes no further.
	if ranges := t.opts.FirewallSources(r); len(ranges) > 0 {
		for _, p := range ranges {
			out = append(out, iptJump{"mangle", iptFirewall, "-s " + p.String() + " " + match + " -j RETURN"})
		}
		out = append(out, iptJump{"mangle", iptFirewall, match + " -j DROP"})
	}
	if r.ClusterIP && !r.NodePort {
		// Whatever port: what the nat table did not redirect.
		ip := "-d " + r.IP.String() + f.hostBits
		out = append(out,
			iptJump{"filter", iptClusterIPs, ip + " -p tcp -j REJECT --reject-with tcp-reset"},
			iptJump{"filter", iptClusterIPs, ip + " -j REJECT --reject-with " + f.icmpUnreachable})
	}
	container, host := iptPortalsContainer, iptPortalsHost
	if r.NodePort {
		container, host = iptNodePortContainer, iptNodePortHost
	}
	if sc := r.ShortCircuitPort; sc != 0 {
		to := " -j REDIRECT --to-ports " + strconv.Itoa(sc)
		for _, p := range rules.Family(t.opts.ClusterCIDRs, f.v6) {
			out = append(out, iptJump{"nat", container, "-s " + p.String() + " " + match + to})
		}
		out = append(out, iptJump{"nat", host, match + to})
		out = append(out, ownerLines(r.Protocol, sc)...)
	}
	if r.Reject || r.Drop {
		target := " -j DROP"
		if r.Reject {
			target = " -j REJECT --reject-with " + f.icmpUnreachable
			if r.Protocol == "tcp" {
				target = " -j REJECT --reject-with tcp-reset"
			}
		}
		chain := iptPortalsReject
		if r.NodePort {
			chain = iptNodePortReject
		}
		return append(out, iptJump{"filter", chain, match + target})
	}
	target := " -j REDIRECT --to-ports " + strconv.Itoa(r.ProxyPort)
	out = append(out, iptJump{"nat", container, match + target})
	if r.ShortCircuitPort == 0 {
		out = append(out, iptJump{"nat", host, match + target})
	}
	return append(out, ownerLines(r.Protocol, r.ProxyPort)...)
}

// ownerLines check that what is redirected to a proxy port reaches only
// kproxy's socket. They are per rule (rules sharing a proxy port repeat
// them, harmlessly) so that Apply adds and deletes them with the rule.
func ownerLines(protocol string, proxyPort int) []iptJump {
	proxy := fmt.Sprintf("-p %s -m %s --dport %d", protocol, protocol, proxyPort)
	if protocol == "tcp" {
		// Only a new connection can reach another process's listener,
		// and its SYN finds the listener.
		proxy += " -m conntrack --ctstate NEW"
	}
	mark := fmt.Sprintf("0x%x/0x%x", steer.SocketMark, steer.SocketMark)
	return []iptJump{
		// The packet is kproxy's unless a full socket says otherwise, as
		// nftables' socket mark matches only a full socket: the socket
		// match restores no mark from a TIME_WAIT socket, which a SYN
		// finds when a client reuses its port while kproxy's side of the
		// last connection waits (the kernel gives that SYN to the
		// listener), nor from a request socket (SYN_RECV).
		{"filter", iptProxyPortOwner, proxy + " -j MARK --set-xmark " + mark},
		{"filter", iptProxyPortOwner, proxy + " -m socket --nowildcard --restore-skmark"},
		{"filter", iptProxyPortOwner, proxy + " -m mark ! --mark " + mark + " -j DROP"},
	}
}

// addLines adds to b the lines that append ("-A") or delete ("-D") the
// rules of rs that belong to family f.
func (t *Rules) addLines(b restoreBatch, f *iptFamily, op string, rs []rules.Rule) {
	for _, r := range rs {
		if t.inFamily(f, r) {
			for _, l := range t.ruleLines(f, r) {
				b.add(l.table, op+" "+l.chain+" "+l.spec)
			}
		}
	}
}

// inFamily reports whether rule r is programmed in family f.
func (t *Rules) inFamily(f *iptFamily, r rules.Rule) bool {
	return r.NodePort || r.IP.Is6() == f.v6
}

// unavailable reports the rules of rs that no available family can
// program (IPv6 rules without ip6tables) as an error wrapping
// rules.ErrFamilyUnavailable, or nil. Such rules are left out; the rest is
// programmed: one missing family must not take the other's rules down.
func (t *Rules) unavailable(rs []rules.Rule) error {
	var skipped []string
	for _, r := range rs {
		ok := false
		for _, f := range t.fams {
			ok = ok || t.inFamily(f, r)
		}
		if !ok {
			skipped = append(skipped, r.Key().String())
		}
	}
	if len(skipped) == 0 {
		return nil
	}
	return fmt.Errorf("%d portal rules not programmed (%s): %w (no ip6tables)", len(skipped), strings.Join(skipped, ", "), rules.ErrFamilyUnavailable)
}

// restoreBatch collects iptables-restore lines by table.
type restoreBatch map[string][]string

func (b restoreBatch) add(table, line string) { b[table] = append(b[table], line) }

func (b restoreBatch) bytes() []byte {
	var buf bytes.Buffer
	for _, table := range iptTables {
		if len(b[table]) == 0 {
			continue
		}
		fmt.Fprintf(&buf, "*%s\n", table)
		for _, l := range b[table] {
			buf.WriteString(l)
			buf.WriteByte('\n')
		}
		buf.WriteString("COMMIT\n")
	}
	return buf.Bytes()
}

// restore runs one iptables-restore of the batches, in order.
func (t *Rules) restore(ctx context.Context, f *iptFamily, bs ...restoreBatch) error {
	var in []byte
	for _, b := range bs {
		in = append(in, b.bytes()...)
	}
	if len(in) == 0 {
		return nil
	}
	if _, err := t.run(ctx, in, f.restore, "-w", "--noflush"); err != nil {
		return fmt.Errorf("%s: %w%s", f, err, failedLine(err, in))
	}
	return nil
}

var restoreLineRE = regexp.MustCompile(`line (\d+) failed`)

// failedLine quotes the input line iptables-restore complains about.
func failedLine(err error, in []byte) string {
	m := restoreLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(in), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return fmt.Sprintf(" (line %d: %s)", n, lines[n-1])
}

// iptSaved is what iptables-save shows of kproxy's chains.
type iptSaved struct {
	chains map[string]map[string]bool // table -> chain -> exists
	jumps  map[string][]string        // table -> "-A CHAIN ..." lines in other chains jumping to kproxy's
	counts map[string]map[string]int  // table -> kproxy chain -> rules
}

func isOurChain(table, chain string) bool {
	for _, c := range iptChains[table] {
		if c == chain {
			return true
		}
	}
	return false
}

func (t *Rules) save(ctx context.Context, f *iptFamily) (*iptSaved, error) {
	s := &iptSaved{chains: map[string]map[string]bool{}, jumps: map[string][]string{}, counts: map[string]map[string]int{}}
	for _, table := range iptTables {
		out, err := t.run(ctx, nil, f.save, "-t", table)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		s.chains[table], s.counts[table] = map[string]bool{}, map[string]int{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				name, _, _ := strings.Cut(line[1:], " ")
				s.chains[table][name] = true
			case strings.HasPrefix(line, "-A "):
				fields := strings.Fields(line)
				if len(fields) < 2 {
					continue
				}
				chain := fields[1]
				if isOurChain(table, chain) {
					s.counts[table][chain]++
					continue
				}
				for i := 2; i+1 < len(fields); i++ {
					if (fields[i] == "-j" || fields[i] == "-g") && isOurChain(table, fields[i+1]) {
						s.jumps[table] = append(s.jumps[table], line)
						break
					}
				}
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: reading %s -t %s: %w", f, f.save, table, err)
		}
	}
	return s, nil
}

// Sync flushes kproxy's chains and refills them with want, and replaces
// every jump to them, in one iptables-restore per family.
func (t *Rules) Sync(ctx context.Context, want rules.Set) error {
	sorted := want.Sorted()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fams {
		saved, err := t.save(ctx, f)
		if err != nil {
			return err
		}
		b := restoreBatch{}
		for _, table := range iptTables {
			for _, c := range iptChains[table] {
				b.add(table, ":"+c+" - [0:0]") // creates or flushes
			}
			for _, j := range saved.jumps[table] {
				b.add(table, "-D"+strings.TrimPrefix(j, "-A"))
			}
		}
		js := t.jumps(f)
		for i := len(js) - 1; i >= 0; i-- { // inserted at the top: reverse order
			b.add(js[i].table, "-I "+js[i].chain+" "+js[i].spec)
		}
		for _, l := range t.staticRules(f) {
			b.add(l.table, "-A "+l.chain+" "+l.spec)
		}
		t.addLines(b, f, "-A", sorted)
		if err := t.restore(ctx, f, b); err != nil {
			return fmt.Errorf("iptables sync of %d rules: %w", len(want), err)
		}
	}
	if err := t.routes.Ensure(); err != nil {
		return err
	}
	return t.unavailable(sorted)
}

// Apply appends the changed rules and then deletes the ones they replace,
// in one iptables-restore per family. iptables-restore commits each table
// on its own, so a packet may see one table changed and the next not yet:
// were a service's redirect (nat) deleted before its drop (filter) is
// added, it would leave by the node's default route in between. So every
// table gets its additions first and only then, in a second pass, its
// deletions: a packet sees the old rules or both, which decide as the old
// ones (a redirected packet no longer matches a drop by service IP; the
// old line of two equal ones comes first, and -D deletes the first).
func (t *Rules) Apply(ctx context.Context, _ *rules.Programmed, del, add []rules.Rule) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fams {
		adds, dels := restoreBatch{}, restoreBatch{}
		t.addLines(adds, f, "-A", add)
		t.addLines(dels, f, "-D", del)
		if err := t.restore(ctx, f, adds, dels); err != nil {
			// A later family, or a later table of this one, may be done.
			return fmt.Errorf("iptables apply of %d changes: %w", len(del)+len(add), err)
		}
	}
	return t.unavailable(add)
}

// Present reports whether every kproxy chain, every jump to it and the
// number of rules in it that cur makes exist, in every family.
func (t *Rules) Present(ctx context.Context, cur rules.Set) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fams {
		saved, err := t.save(ctx, f)
		if err != nil {
			return false, err
		}
		want := map[string]map[string]int{"nat": {}, "filter": {}, "mangle": {}}
		for _, l := range t.staticRules(f) {
			want[l.table][l.chain]++
		}
		for _, r := range cur {
			if t.inFamily(f, r) {
				for _, l := range t.ruleLines(f, r) {
					want[l.table][l.chain]++
				}
			}
		}
		for _, table := range iptTables {
			for _, c := range iptChains[table] {
				if !saved.chains[table][c] || saved.counts[table][c] != want[table][c] {
					return false, nil
				}
			}
		}
		wantJumps := map[string]int{}
		for _, j := range t.jumps(f) {
			wantJumps[j.table]++
		}
		for _, table := range iptTables {
			if len(saved.jumps[table]) != wantJumps[table] {
				return false, nil
			}
		}
	}
	return t.routes.Present()
}

// Cleanup deletes the jumps to kproxy's chains and the chains, in every
// family.
func (t *Rules) Cleanup(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fams {
		saved, err := t.save(ctx, f)
		if err != nil {
			return err
		}
		b := restoreBatch{}
		for _, table := range iptTables {
			for _, j := range saved.jumps[table] {
				b.add(table, "-D"+strings.TrimPrefix(j, "-A"))
			}
			for _, c := range iptChains[table] {
				if saved.chains[table][c] {
					b.add(table, ":"+c+" - [0:0]")
					b.add(table, "-X "+c)
				}
			}
		}
		if err := t.restore(ctx, f, b); err != nil {
			return fmt.Errorf("iptables cleanup: %w", err)
		}
	}
	return t.routes.Remove()
}
