package rulestest

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the tests produce")

// Golden compares got with testdata/<name>.golden, or rewrites the file
// with -update. Review a rewritten file as you would review the rules.
func Golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from what the test produced (rerun with -update and review the diff):\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// goldenPort is one service port of the golden scenario with what its
// ServicePort actor would send the Rules actor.
type goldenPort struct {
	sp                 *messages.ServicePort
	proxyPort, extPort int
	endpoints          []*messages.Endpoint
}

func servicePort(name string, proto messages.Protocol, port, nodePort int32, cluster, external, lb []string) *messages.ServicePort {
	split := func(ips []string) *messages.IPSet {
		set := &messages.IPSet{}
		for _, ip := range ips {
			if strings.Contains(ip, ":") {
				set.V6 = append(set.V6, ip)
			} else {
				set.V4 = append(set.V4, ip)
			}
		}
		return set
	}
	return &messages.ServicePort{
		Key:  &messages.ServicePortKey{Namespace: "default", Name: name, PortName: strings.ToLower(proto.String()), Protocol: proto},
		Port: port, NodePort: nodePort,
		ClusterIps: split(cluster), ExternalIps: split(external), LoadBalancerIps: split(lb),
	}
}

var (
	both     = []*messages.Endpoint{{Ips: []string{"192.0.2.100"}, Port: 8080, Internal: true, External: true, Cluster: true}}
	internal = []*messages.Endpoint{{Ips: []string{"192.0.2.101"}, Port: 8080, Internal: true, Cluster: true}}
)

// localExternal sets externalTrafficPolicy Local.
func localExternal(sp *messages.ServicePort) *messages.ServicePort {
	sp.ExternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	return sp
}

// bothLocal sets both traffic policies Local.
func bothLocal(sp *messages.ServicePort) *messages.ServicePort {
	sp.InternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	return localExternal(sp)
}

// sourceRanges sets loadBalancerSourceRanges.
func sourceRanges(sp *messages.ServicePort, ranges ...string) *messages.ServicePort {
	sp.LoadBalancerSourceRanges = ranges
	return sp
}

// goldenPorts is the golden scenario:
//
//	web    TCP, dual-stack ClusterIP, node port 30080                 -> 40001
//	dns    UDP, ClusterIP                                              -> 40002
//	lb     TCP, ClusterIP, external IP, LB IP (both families), node port
//	       30020, externalTrafficPolicy Local: cluster traffic         -> 40003,
//	       external traffic                                            -> 40004
//	       but from pods and the node                                  -> 40003,
//	       LB IPs only from loadBalancerSourceRanges
//	empty  TCP, ClusterIP and node port 30030, no endpoints: rejected
//	remote TCP, ClusterIP, external IP, node port 30040,
//	       externalTrafficPolicy Local, no local endpoint: cluster
//	       traffic -> 40005, external dropped unless from pods or the node,
//	       which go to 40005
//	both   TCP, ClusterIP, LB IP, node port 30050, both policies Local:
//	       cluster and external traffic -> 40008 (local endpoints), from
//	       pods and the node -> 40009 (the cluster's endpoints)
func goldenPorts() []goldenPort {
	return []goldenPort{
		{servicePort("web", messages.Protocol_TCP, 80, 30080, []string{"198.18.0.10", "2001:db8:5::10"}, nil, nil), 40001, 0, both},
		{servicePort("dns", messages.Protocol_UDP, 53, 0, []string{"198.18.0.53"}, nil, nil), 40002, 0, both},
		{sourceRanges(localExternal(servicePort("lb", messages.Protocol_TCP, 443, 30020, []string{"198.18.0.20"}, []string{"192.0.2.20"}, []string{"198.51.100.20", "2001:db8:6::20"})),
			"203.0.113.0/24", "192.0.2.2/32", "2001:db8:7::/48"), 40003, 40004, both},
		{servicePort("empty", messages.Protocol_TCP, 80, 30030, []string{"198.18.0.30"}, nil, nil), 40006, 0, nil},
		{bothLocal(servicePort("both", messages.Protocol_TCP, 80, 30050, []string{"198.18.0.50"}, nil, []string{"198.51.100.50"})), 40008, 40009, both},
		{localExternal(servicePort("remote", messages.Protocol_TCP, 80, 30040, []string{"198.18.0.40"}, []string{"192.0.2.40"}, nil)), 40005, 40007, internal},
	}
}

func (g goldenPort) rules(t *testing.T) []rules.Rule {
	t.Helper()
	internal, external := rules.Verdicts(g.endpoints)
	rs, err := rules.ForServicePort(g.sp, g.proxyPort, g.extPort, internal, external)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// GoldenRules are the rules of the golden scenario (see goldenPorts): every
// kind of service IP, node ports, both traffic scopes with two proxy ports,
// rejects of one or both scopes, both families.
func GoldenRules(t *testing.T) []rules.Rule {
	var out []rules.Rule
	for _, g := range goldenPorts() {
		out = append(out, g.rules(t)...)
	}
	return out
}

// GoldenChange is an incremental change of the golden scenario: "empty"
// gets an endpoint (its rejects become redirects to 40006) and "dns" is
// deleted.
func GoldenChange(t *testing.T) (upserts, removals []rules.Rule) {
	for _, g := range goldenPorts() {
		switch g.sp.GetKey().GetName() {
		case "empty":
			g.endpoints = both
			upserts = append(upserts, g.rules(t)...)
		case "dns":
			removals = append(removals, g.rules(t)...)
		}
	}
	return upserts, removals
}

// GoldenCIDRs are the options of the golden scenario with the cluster's
// pod ranges and service CIDRs of both families, the node's IPs (the IPv4
// one within lb's source ranges, so its IPv4 LB IP admits itself) and a
// proxy port range.
func GoldenCIDRs() rules.Options {
	return rules.Options{
		ClusterCIDRs:   []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:42::/56")},
		ServiceCIDRs:   []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("2001:db8:5::/108")},
		NodeIPs:        []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")},
		ProxyPortFirst: 40000, ProxyPortLast: 40999,
	}
}

// goldenPolicyChanges are two Applies to the golden rules all: the first
// (changed, removed) narrows the IPv4 rules' source ranges to
// 192.0.2.0/24 and removes the IPv6 rules that have ranges; the second
// (flipped) makes the served external destinations with a short-circuit
// drop, so their elements go and come back in one transaction.
func goldenPolicyChanges(t *testing.T, all []rules.Rule) (changed, removed, flipped []rules.Rule) {
	t.Helper()
	for _, r := range all {
		if r.SourceRanges == "" {
			continue
		}
		if r.IP.Is4() {
			r.SourceRanges = "192.0.2.0/24"
			changed = append(changed, r)
		} else {
			removed = append(removed, r)
		}
	}
	for _, r := range all {
		if r.ShortCircuitPort != 0 && !r.Drop && r.SourceRanges == "" {
			r.Drop = true
			flipped = append(flipped, r)
		}
	}
	if len(flipped) == 0 {
		t.Fatal("the golden scenario has no served short-circuit")
	}
	return changed, removed, flipped
}
