//go:build linux

package conformance

import "net/netip"

// The packet flows of kube-proxy's nftables tests (k8s.io/kubernetes
// v1.36.3, pkg/proxy/nftables/proxier_test.go), as data: every test that
// runs packet flows, and flows read off the ruleset TestOverallNFTablesRules
// and TestBadIPs expect. Addresses are mapped onto documentation ranges by
// the table in docs/conformance.md (and doc.go); ports, node ports, health
// check node ports, names and the node name (test-node) are kube-proxy's.
//
// kube-proxy's "masq" expectation is not data here: a userspace proxy
// always connects to the endpoint from the node, so every flow is
// "masqueraded" and the flag has no meaning for it.

// source is where a flow's connection comes from.
type source string

const (
	// fromExternal is a client outside the cluster: 203.0.113.2
	// (IPv6 2001:db8:2::1), in the outside namespace.
	fromExternal source = "external"
	// fromBlocked is an outside client that no loadBalancerSourceRanges
	// admit: 203.0.113.130.
	fromBlocked source = "external-blocked"
	// fromPod is kube-proxy's pod (10.0.0.2): a source in the cluster CIDR.
	// It runs twice: from a pod on this node and from a pod on another node.
	fromPod source = "pod"
	// fromPodHere is a pod on this node, 198.51.100.2 (2001:db8:1::2),
	// behind the node's pod link.
	fromPodHere source = "pod-this-node"
	// fromPodThere is a pod on another node, 198.51.100.200
	// (2001:db8:1:1::200): in the cluster CIDR, arriving from outside.
	fromPodThere source = "pod-other-node"
	// fromEndpoint is an endpoint connecting to its own service (hairpin):
	// 198.51.100.11, on this node.
	fromEndpoint source = "endpoint"
	// fromNode is the node itself, from its own IP 192.0.2.2 (2001:db8::2).
	fromNode source = "node"
	// fromLocalhost is the node itself from 127.0.0.1 (::1).
	fromLocalhost source = "node-localhost"
	// fromLBIP is a packet whose source something outside the node has
	// rewritten to the LB IP it is sent to: a client in the outside
	// namespace, 203.0.113.3, whose source the outside rewrites
	// (lbHairpin).
	fromLBIP source = "lb-ip"
)

// Expected outcomes besides a set of endpoints.
const (
	wantReject = "REJECT" // refused at once: TCP RST or ICMP unreachable
	wantDrop   = "DROP"   // no answer at all within the timeout
	// wantNone is kube-proxy's "no rule matched": the packet goes on as the
	// network routes it; here that means no endpoint answers.
	wantNone = "NONE"
)

// Why flows do not apply.
const (
	naSCTP = "SCTP: kproxy proxies TCP and UDP only"
	naMasq = "masqueradeAll: a userspace proxy always connects from the node; there is nothing to masquerade"
)

// flow is one packet flow: a connection from a source to a destination
// and what kube-proxy does with it.
type flow struct {
	name  string // kube-proxy's name for the flow
	from  source
	proto string // "tcp" (when empty) or "udp" or "sctp"
	to    string // destination ip:port
	// want is the set of endpoints ("ip:port ip:port") the connections
	// must reach, all of them and no other, or wantReject, wantDrop,
	// wantNone.
	want string
	// notApplicable, when set, is why the flow is not run.
	notApplicable string
	// differs, when set, is why kproxy deliberately answers otherwise;
	// kproxyWant is then what kproxy is expected to do instead.
	differs, kproxyWant string
}

// phase is a state of the services (the manifest, or the manifest without
// its EndpointSlices) and the flows run in it.
type phase struct {
	name     string
	noSlices bool // the EndpointSlices deleted
	flows    []flow
}

// kpCase is one kube-proxy test (or one of its table cases): a manifest,
// the flags kube-proxy's fake proxier implies, and the phases.
type kpCase struct {
	test, variant string
	manifest      string // in testdata
	// nodePortAddresses overrides the default (the node IP only, as
	// kube-proxy's fake proxier).
	nodePortAddresses string
	// noClusterCIDR runs without --cluster-cidr (kube-proxy's
	// "no LocalTrafficDetector").
	noClusterCIDR bool
	notApplicable string // the whole case
	phases        []phase
}

func (c kpCase) id() string {
	if c.variant == "" {
		return c.test
	}
	return c.test + "/" + c.variant
}

// afterDelete is the second phase of the traffic-policy tests: the slice
// deleted, the service left without endpoints.
func afterDelete(flows ...flow) phase {
	return phase{name: "endpoints deleted", noSlices: true, flows: flows}
}

func one(flows ...flow) []phase { return []phase{{flows: flows}} }

var cases = []kpCase{
	{
		test: "TestOverallNFTablesRules", manifest: "overall.yaml",
		phases: one(
			flow{name: "svc1: pod to cluster IP", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80"},
			flow{name: "svc1: port the service does not serve", from: fromPod, to: "198.18.0.41:443", want: wantReject},
			flow{name: "svc2 (eTP=Local, no local endpoint): external to LB IP", from: fromExternal, to: "203.0.113.204:80", want: wantDrop},
			flow{name: "svc2 (eTP=Local, no local endpoint): external to external IP", from: fromExternal, to: "203.0.113.222:80", want: wantDrop},
			flow{name: "svc2 (eTP=Local, no local endpoint): external to node port", from: fromExternal, to: "192.0.2.2:3001", want: wantDrop},
			flow{name: "svc2 (eTP=Local): pod to LB IP is short-circuited", from: fromPod, to: "203.0.113.204:80", want: "198.51.100.12:80"},
			flow{name: "svc2 (eTP=Local): node to LB IP is short-circuited", from: fromNode, to: "203.0.113.204:80", want: "198.51.100.12:80"},
			flow{name: "svc2: pod to cluster IP", from: fromPod, to: "198.18.0.42:80", want: "198.51.100.12:80"},
			flow{name: "svc3: external to node port", from: fromExternal, to: "192.0.2.2:3003", want: "198.51.100.13:80"},
			flow{name: "svc3: pod to cluster IP", from: fromPod, to: "198.18.0.43:80", want: "198.51.100.13:80"},
			flow{name: "svc4: external to external IP", from: fromExternal, to: "203.0.113.233:80", want: "198.51.100.14:80 198.51.100.15:80"},
			flow{name: "svc4: pod to cluster IP", from: fromPod, to: "198.18.0.44:80", want: "198.51.100.14:80 198.51.100.15:80"},
			flow{name: "svc5: external in source range to LB IP", from: fromExternal, to: "203.0.113.208:80", want: "198.51.100.13:80"},
			flow{name: "svc5: external outside source range to LB IP", from: fromBlocked, to: "203.0.113.208:80", want: wantDrop},
			flow{name: "svc5: external to node port (source ranges do not apply)", from: fromBlocked, to: "192.0.2.2:3002", want: "198.51.100.13:80"},
			// kube-proxy admits an LB IP as its own source only when the
			// ranges admit the node's IP (TestLoadBalancer's SNAT flows).
			flow{name: "svc5: SNATted to its LB IP, node IP outside the source range (added)", from: fromLBIP, to: "203.0.113.208:80", want: wantDrop},
			flow{name: "svc6: pod to cluster IP without endpoints", from: fromPod, to: "198.18.0.46:80", want: wantReject},
			flow{name: "unallocated cluster IP in the service CIDR", from: fromPod, to: "198.18.0.50:80", want: wantDrop},
		),
	},
	{
		test: "TestNoEndpointsReject", manifest: "no-endpoints-reject.yaml",
		phases: one(
			flow{name: "pod to cluster IP with no endpoints", from: fromPod, to: "198.18.0.41:80", want: wantReject},
			flow{name: "external to external IP with no endpoints", from: fromExternal, to: "192.0.2.111:80", want: wantReject},
			flow{name: "pod to NodePort with no endpoints", from: fromPod, to: "192.0.2.2:3001", want: wantReject},
			flow{name: "external to NodePort with no endpoints", from: fromExternal, to: "192.0.2.2:3001", want: wantReject},
			flow{name: "pod to LoadBalancer IP with no endpoints", from: fromPod, to: "203.0.113.204:80", want: wantReject},
			flow{name: "external to LoadBalancer IP with no endpoints", from: fromExternal, to: "203.0.113.204:80", want: wantReject},
		),
	},
	{
		test: "TestClusterIPGeneral", manifest: "clusterip-general.yaml",
		phases: one(
			flow{name: "simple clusterIP", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80"},
			flow{name: "hairpin to cluster IP", from: fromEndpoint, to: "198.18.0.41:80", want: "198.51.100.11:80"},
			flow{name: "clusterIP with multiple endpoints", from: fromPod, to: "198.18.0.42:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "clusterIP with TargetPort", from: fromPod, to: "198.18.0.42:443", want: "198.51.100.11:8443 198.51.100.31:8443"},
			flow{name: "clusterIP with TCP, UDP, and SCTP on same port (TCP)", from: fromPod, proto: "tcp", to: "198.18.0.42:53", want: "198.51.100.11:5353 198.51.100.31:5353"},
			flow{name: "clusterIP with TCP, UDP, and SCTP on same port (UDP)", from: fromPod, proto: "udp", to: "198.18.0.42:53", want: "198.51.100.11:53 198.51.100.31:53"},
			flow{name: "clusterIP with TCP, UDP, and SCTP on same port (SCTP)", from: fromPod, proto: "sctp", to: "198.18.0.42:53", want: "198.51.100.11:53 198.51.100.31:53", notApplicable: naSCTP},
			flow{name: "TCP-only port does not match UDP traffic", from: fromPod, proto: "udp", to: "198.18.0.42:80", want: wantReject},
			flow{name: "svc1 does not accept svc2's ports", from: fromPod, to: "198.18.0.41:443", want: wantReject},
			flow{name: "packet to unallocated cluster ip", from: fromPod, to: "198.18.0.50:80", want: wantDrop},
		),
	},
	{
		test: "TestLoadBalancer", manifest: "load-balancer.yaml",
		phases: one(
			flow{name: "pod to cluster IP", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80"},
			flow{name: "external to nodePort", from: fromExternal, to: "192.0.2.2:3001", want: "198.51.100.11:80"},
			flow{name: "nodePort bypasses LoadBalancerSourceRanges", from: fromBlocked, to: "192.0.2.2:3001", want: "198.51.100.11:80"},
			flow{name: "accepted external to LB1", from: fromExternal, to: "203.0.113.204:80", want: "198.51.100.11:80"},
			flow{name: "accepted external to LB2", from: fromExternal, to: "203.0.113.208:80", want: "198.51.100.11:80"},
			flow{name: "blocked external to LB1", from: fromBlocked, to: "203.0.113.204:80", want: wantDrop},
			flow{name: "blocked external to LB2", from: fromBlocked, to: "203.0.113.208:80", want: wantDrop},
			flow{name: "pod to LB1 (blocked by LoadBalancerSourceRanges)", from: fromPod, to: "203.0.113.204:80", want: wantDrop},
			flow{name: "pod to LB2 (blocked by LoadBalancerSourceRanges)", from: fromPod, to: "203.0.113.208:80", want: wantDrop},
			flow{name: "node to LB1 (allowed by LoadBalancerSourceRanges)", from: fromNode, to: "203.0.113.204:80", want: "198.51.100.11:80"},
			flow{name: "node to LB2 (allowed by LoadBalancerSourceRanges)", from: fromNode, to: "203.0.113.208:80", want: "198.51.100.11:80"},
			flow{name: "same node to LB1, SNATted to LB1 (implicitly allowed)", from: fromLBIP, to: "203.0.113.204:80", want: "198.51.100.11:80"},
			flow{name: "same node to LB2, SNATted to LB2 (implicitly allowed)", from: fromLBIP, to: "203.0.113.208:80", want: "198.51.100.11:80"},
		),
	},
	nodePorts("ipv4", "nodeports-ipv4.yaml", "", "192.0.2.2", "198.18.0.41:80", "192.0.2.130", "198.51.100.11:80 198.51.100.31:80", false),
	nodePorts("ipv4, multiple nodeport-addresses", "nodeports-ipv4.yaml", "192.0.2.0/25,192.0.2.128/25,2001:db8::/64", "192.0.2.2", "198.18.0.41:80", "192.0.2.130", "198.51.100.11:80 198.51.100.31:80", true),
	nodePorts("ipv6", "nodeports-ipv6.yaml", "", "2001:db8::2", "[2001:db8:5::41]:80", "2001:db8:3::2", "[2001:db8:1::11]:80 [2001:db8:1::31]:80", false),
	nodePorts("ipv6, multiple nodeport-addresses", "nodeports-ipv6.yaml", "192.0.2.0/25,192.0.2.128/25,2001:db8::/64,2001:db8:3::2/128", "2001:db8::2", "[2001:db8:5::41]:80", "2001:db8:3::2", "[2001:db8:1::11]:80 [2001:db8:1::31]:80", true),
	{
		test: "TestExternalTrafficPolicyLocal", manifest: "etp-local.yaml",
		phases: one(
			flow{name: "pod to cluster IP hits both endpoints", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "pod to external IP hits both endpoints", from: fromPod, to: "192.0.2.111:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to external IP hits only local endpoint", from: fromExternal, to: "192.0.2.111:80", want: "198.51.100.31:80"},
			flow{name: "pod to LB IP hits both endpoints", from: fromPod, to: "203.0.113.204:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to LB IP hits only local endpoint", from: fromExternal, to: "203.0.113.204:80", want: "198.51.100.31:80"},
			flow{name: "pod to NodePort hits both endpoints", from: fromPod, to: "192.0.2.2:3001", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to NodePort hits only local endpoint", from: fromExternal, to: "192.0.2.2:3001", want: "198.51.100.31:80"},
		),
	},
	{
		test: "TestExternalTrafficPolicyCluster", manifest: "etp-cluster.yaml",
		phases: one(
			flow{name: "pod to cluster IP hits both endpoints", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "pod to external IP hits both endpoints", from: fromPod, to: "192.0.2.111:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to external IP hits both endpoints", from: fromExternal, to: "192.0.2.111:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "pod to LB IP hits both endpoints", from: fromPod, to: "203.0.113.204:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to LB IP hits both endpoints", from: fromExternal, to: "203.0.113.204:80", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "pod to NodePort hits both endpoints", from: fromPod, to: "192.0.2.2:3001", want: "198.51.100.11:80 198.51.100.31:80"},
			flow{name: "external to NodePort hits both endpoints", from: fromExternal, to: "192.0.2.2:3001", want: "198.51.100.11:80 198.51.100.31:80"},
		),
	},
	internalTrafficPolicy("internalTrafficPolicy is cluster", "itp-cluster.yaml",
		flow{name: "pod to ClusterIP hits all endpoints", want: "198.51.100.41:80 198.51.100.42:80 198.51.100.43:80"}),
	internalTrafficPolicy("internalTrafficPolicy is local and there is one local endpoint", "itp-local-one.yaml",
		flow{name: "pod to ClusterIP hits only local endpoint", want: "198.51.100.41:80"}),
	internalTrafficPolicy("internalTrafficPolicy is local and there are multiple local endpoints", "itp-local-multiple.yaml",
		flow{name: "pod to ClusterIP hits all local endpoints", want: "198.51.100.41:80 198.51.100.42:80"}),
	internalTrafficPolicy("internalTrafficPolicy is local and there are no local endpoints", "itp-local-none.yaml",
		flow{name: "no endpoints", want: wantDrop}),
	terminating("Local", "ready endpoints exist", "term-local-ready.yaml",
		"198.51.100.41:80 198.51.100.42:80 198.51.100.45:80", "198.51.100.41:80 198.51.100.42:80"),
	terminating("Local", "only terminating endpoints exist", "term-local-only-terminating.yaml",
		"198.51.100.45:80", "198.51.100.42:80 198.51.100.43:80"),
	terminating("Local", "terminating endpoints on remote node", "term-local-remote-terminating.yaml",
		"198.51.100.45:80", wantDrop),
	terminating("Local", "no usable endpoints on any node", "term-local-none-usable.yaml",
		wantReject, wantReject),
	terminating("Cluster", "ready endpoints exist", "term-cluster-ready.yaml",
		"198.51.100.41:80 198.51.100.42:80 198.51.100.45:80", "198.51.100.41:80 198.51.100.42:80 198.51.100.45:80"),
	terminating("Cluster", "only terminating endpoints exist", "term-cluster-only-terminating.yaml",
		"198.51.100.42:80 198.51.100.43:80 198.51.100.45:80", "198.51.100.42:80 198.51.100.43:80 198.51.100.45:80"),
	terminating("Cluster", "terminating endpoints on remote node", "term-cluster-remote-terminating.yaml",
		"198.51.100.45:80", "198.51.100.45:80"),
	terminating("Cluster", "no usable endpoints on any node", "term-cluster-none-usable.yaml",
		wantReject, wantReject),
	{
		test: "TestInternalExternalMasquerade", variant: "base", manifest: "internal-external.yaml",
		phases: one(internalExternalFlows(nil)...),
	},
	{
		// Without a way to tell pods (kube-proxy's detect-local), pods'
		// traffic to an eTP=Local service's external addresses is not
		// short-circuited.
		test: "TestInternalExternalMasquerade", variant: "no LocalTrafficDetector", manifest: "internal-external.yaml",
		noClusterCIDR: true,
		phases: one(internalExternalFlows(map[string]string{
			"pod to NodePort with eTP:Local": "198.51.100.12:80",
			"pod to LB with eTP:Local":       "198.51.100.12:80",
		})...),
	},
	{test: "TestInternalExternalMasquerade", variant: "masqueradeAll", manifest: "internal-external.yaml", notApplicable: naMasq},
	{test: "TestInternalExternalMasquerade", variant: "masqueradeAll, no LocalTrafficDetector", manifest: "internal-external.yaml", notApplicable: naMasq},
	// kube-proxy checks that no rule exists for an ipMode Proxy LB IP: the
	// load balancer proxies, and packets to its IP go on to it.
	lbIPMode("ipMode Proxy", "lb-ipmode-proxy.yaml", "198.18.30.41:80", "203.0.113.204:80", wantNone),
	lbIPMode("ipMode VIP", "lb-ipmode-vip.yaml", "198.18.30.42:80", "203.0.113.205:80", "198.51.100.11:80"),
	lbIPMode("ipMode nil", "lb-ipmode-nil.yaml", "198.18.30.43:80", "203.0.113.206:80", "198.51.100.11:80"),
	{
		// The ruleset kube-proxy expects is that of the same service written
		// without the leading zeros.
		test: "TestBadIPs", manifest: "bad-ips.yaml",
		phases: one(
			flow{name: "pod to cluster IP", from: fromPod, to: "198.18.0.41:80", want: "198.51.100.11:80"},
			flow{name: "external to external IP", from: fromExternal, to: "203.0.113.222:80", want: "198.51.100.11:80"},
			flow{name: "external to node port", from: fromExternal, to: "192.0.2.2:3001", want: "198.51.100.11:80"},
			flow{name: "external in source range to LB IP", from: fromExternal, to: "203.0.113.204:80", want: "198.51.100.11:80"},
			flow{name: "external outside source range to LB IP", from: fromBlocked, to: "203.0.113.204:80", want: wantDrop},
		),
	},
}

// nodePorts is a case of TestNodePorts: alt is a second node IP, which
// answers on node ports only when allowAlt (in --nodeport-addresses).
func nodePorts(variant, manifest, addrs, nodeIP, clusterIP, alt, eps string, allowAlt bool) kpCase {
	hostPort := func(ip string) string {
		return netip.AddrPortFrom(netip.MustParseAddr(ip), 3001).String()
	}
	flows := []flow{
		{name: "pod to cluster IP", from: fromPod, to: clusterIP, want: eps},
		{name: "external to nodePort", from: fromExternal, to: hostPort(nodeIP), want: eps},
		{name: "node to nodePort", from: fromNode, to: hostPort(nodeIP), want: eps},
		// Not one of kube-proxy's flows: its nftables mode serves node
		// ports on the --nodeport-addresses only, never on localhost.
		{name: "node localhost to nodePort on localhost (added)", from: fromLocalhost, to: hostPort(loopback(nodeIP)), want: wantNone},
	}
	if allowAlt {
		flows = append(flows, flow{name: "external to nodePort on secondary IP", from: fromExternal, to: hostPort(alt), want: eps})
	} else {
		flows = append(flows, flow{name: "secondary nodeIP ignores NodePorts", from: fromExternal, to: hostPort(alt), want: wantNone})
	}
	return kpCase{test: "TestNodePorts", variant: variant, manifest: manifest, nodePortAddresses: addrs, phases: one(flows...)}
}

// loopback is the loopback address of ip's family.
func loopback(ip string) string {
	if netip.MustParseAddr(ip).Is6() {
		return "::1"
	}
	return "127.0.0.1"
}

// internalTrafficPolicy is a case of TestInternalTrafficPolicy: a pod to
// the cluster IP, then the same once the slice is deleted.
func internalTrafficPolicy(variant, manifest string, f flow) kpCase {
	f.from, f.to = fromPod, "198.18.1.1:80"
	return kpCase{test: "TestInternalTrafficPolicy", variant: variant, manifest: manifest, phases: []phase{
		{flows: []flow{f}},
		afterDelete(flow{name: "endpoints deleted", from: fromPod, to: "198.18.1.1:80", want: wantReject}),
	}}
}

// terminating is a case of TestTerminatingEndpointsTrafficPolicy<policy>.
func terminating(policy, variant, manifest, podWant, externalWant string) kpCase {
	ext := "external to LB"
	switch {
	case policy == "Local" && externalWant == wantDrop:
		ext = "external to LB, no locally-usable endpoints"
	case policy == "Local" && externalWant == wantReject:
		ext = "external to LB, no usable endpoints"
	}
	pod := "pod to clusterIP"
	if policy == "Local" && podWant == wantReject {
		pod = "pod to clusterIP, no usable endpoints"
	}
	return kpCase{test: "TestTerminatingEndpointsTrafficPolicy" + policy, variant: variant, manifest: manifest, phases: []phase{
		{flows: []flow{
			{name: pod, from: fromPod, to: "198.18.1.1:80", want: podWant},
			{name: ext, from: fromExternal, to: "203.0.113.204:80", want: externalWant},
		}},
		afterDelete(
			flow{name: "pod to clusterIP after endpoints deleted", from: fromPod, to: "198.18.1.1:80", want: wantReject},
			flow{name: "external to LB after endpoints deleted", from: fromExternal, to: "203.0.113.204:80", want: wantReject},
		),
	}}
}

// lbIPMode is a case of TestLoadBalancerIngressRouteTypeProxy.
func lbIPMode(variant, manifest, clusterIP, lbIP, lbWant string) kpCase {
	return kpCase{test: "TestLoadBalancerIngressRouteTypeProxy", variant: variant, manifest: manifest, phases: one(
		flow{name: "pod to cluster IP", from: fromPod, to: clusterIP, want: "198.51.100.11:80"},
		flow{name: "external to LB IP", from: fromExternal, to: lbIP, want: lbWant},
	)}
}

// internalExternalFlows are TestInternalExternalMasquerade's flows, with
// the outputs a variant overrides.
func internalExternalFlows(override map[string]string) []flow {
	const (
		svc1 = "198.51.100.11:80 198.51.100.21:80"
		svc2 = "198.51.100.12:80 198.51.100.22:80"
		svc3 = "198.51.100.13:80 198.51.100.23:80"
	)
	flows := []flow{
		{name: "pod to ClusterIP", from: fromPod, to: "198.18.0.41:80", want: svc1},
		{name: "pod to NodePort", from: fromPod, to: "192.0.2.2:3001", want: svc1},
		{name: "pod to LB", from: fromPod, to: "203.0.113.204:80", want: svc1},
		{name: "node to ClusterIP", from: fromNode, to: "198.18.0.41:80", want: svc1},
		{name: "node to NodePort", from: fromNode, to: "192.0.2.2:3001", want: svc1},
		{name: "node to LB", from: fromNode, to: "203.0.113.204:80", want: svc1},
		{name: "external to ClusterIP", from: fromExternal, to: "198.18.0.41:80", want: svc1},
		{name: "external to NodePort", from: fromExternal, to: "192.0.2.2:3001", want: svc1},
		{name: "external to LB", from: fromExternal, to: "203.0.113.204:80", want: svc1},

		{name: "pod to ClusterIP with eTP:Local", from: fromPod, to: "198.18.0.42:80", want: svc2},
		{name: "pod to NodePort with eTP:Local", from: fromPod, to: "192.0.2.2:3002", want: svc2},
		{name: "pod to LB with eTP:Local", from: fromPod, to: "203.0.113.208:80", want: svc2},
		{name: "node to ClusterIP with eTP:Local", from: fromNode, to: "198.18.0.42:80", want: svc2},
		// kube-proxy's flow goes to svc1's node port (3001), as written.
		{name: "node to NodePort with eTP:Local", from: fromNode, to: "192.0.2.2:3001", want: svc1},
		{name: "node to LB with eTP:Local", from: fromNode, to: "203.0.113.208:80", want: svc2},
		{name: "external to ClusterIP with eTP:Local", from: fromExternal, to: "198.18.0.42:80", want: svc2},
		{name: "external to NodePort with eTP:Local", from: fromExternal, to: "192.0.2.2:3002", want: "198.51.100.12:80"},
		{name: "external to LB with eTP:Local", from: fromExternal, to: "203.0.113.208:80", want: "198.51.100.12:80"},

		{name: "pod to ClusterIP with iTP:Local", from: fromPod, to: "198.18.0.43:80", want: "198.51.100.13:80"},
		{name: "pod to NodePort with iTP:Local", from: fromPod, to: "192.0.2.2:3003", want: svc3},
		{name: "pod to LB with iTP:Local", from: fromPod, to: "203.0.113.212:80", want: svc3},
		{name: "node to ClusterIP with iTP:Local", from: fromNode, to: "198.18.0.43:80", want: "198.51.100.13:80"},
		{name: "node to NodePort with iTP:Local", from: fromNode, to: "192.0.2.2:3003", want: svc3},
		{name: "node to LB with iTP:Local", from: fromNode, to: "203.0.113.212:80", want: svc3},
		{name: "external to ClusterIP with iTP:Local", from: fromExternal, to: "198.18.0.43:80", want: "198.51.100.13:80"},
		{name: "external to NodePort with iTP:Local", from: fromExternal, to: "192.0.2.2:3003", want: svc3},
		{name: "external to LB with iTP:Local", from: fromExternal, to: "203.0.113.212:80", want: svc3},
	}
	for i := range flows {
		if w, ok := override[flows[i].name]; ok {
			flows[i].want = w
		}
	}
	return flows
}
