// Package conformance runs kube-proxy's own packet flows against the kproxy
// binary; it has no code outside its tests.
//
// kube-proxy's nftables tests (k8s.io/kubernetes v1.36.3,
// pkg/proxy/nftables/proxier_test.go) describe what a node does with a
// packet as data: a source IP, a destination IP and port, and the answer
// (a set of endpoints, REJECT, DROP, or no rule at all). cases_test.go
// holds every such flow, in its own words, with the services and
// EndpointSlices of each test as manifests kproxy's file source reads
// (testdata/); flows read off the rulesets of TestOverallNFTablesRules and
// TestBadIPs are there too. Flows that do not apply (masquerading, SCTP)
// and flows kproxy deliberately answers otherwise are in the data with
// their reason, and in docs/conformance.md.
//
// TestConformanceKubeProxyFlows builds kproxy, then for each case and each
// portal (nftables, iptables) builds a topology of three network
// namespaces (test/netnstest):
//
//	outside (external clients, a pod on another node) -- node (kproxy) -- pods (a pod here, the endpoints)
//
// starts kproxy in the node on the case's manifest, polls its admin API
// and kernel rules until it serves it (never sleeps for it), and runs the
// flows in parallel as real connections from the flow's source: the
// endpoints answer with their own ip:port, so the answers over a bounded
// number of connections must cover exactly the expected set; REJECT must
// be refused within a second; DROP must stay unanswered for 1.5 s.
// Traffic-policy cases then delete their EndpointSlices and run the flows
// of that phase. At the end the test logs a table of every flow (status,
// source, destination, want, got); $KPROXY_CONFORMANCE_REPORT names a file
// to write it to.
//
// kube-proxy's addresses are mapped onto documentation ranges only (the
// table is in docs/conformance.md); ports, node ports and names are
// kube-proxy's. The suite passes --cluster-cidr and
// --service-cluster-ip-range when the binary has them; without them the
// flows that need them fail.
//
// TestCasesData checks the data without root: every manifest is used and
// parses, every address is in a documentation range, every endpoint a flow
// wants is one of its case's.
//
// The flows need root and Linux (they skip otherwise) and nft, iptables-save and
// ip6tables-save. Run it alone with
//
//	go test -count=1 -v -run TestConformanceKubeProxyFlows ./test/conformance/
package conformance
