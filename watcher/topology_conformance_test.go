package watcher

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kproxy/kproxy/messages"
)

// topologyCase is one case of testdata/topology-cases.yaml (its header
// explains the fields).
type topologyCase struct {
	Name    string  `json:"name"`
	Source  string  `json:"source"`
	Node    string  `json:"node"`
	Zone    *string `json:"zone"`
	Service struct {
		InternalTrafficPolicy string `json:"internalTrafficPolicy"`
		ExternalTrafficPolicy string `json:"externalTrafficPolicy"`
		NodePort              int32  `json:"nodePort"`
	} `json:"service"`
	Endpoints []struct {
		IP           string   `json:"ip"`
		Local        bool     `json:"local"`
		Ready        bool     `json:"ready"`
		Serving      bool     `json:"serving"`
		ServingUnset bool     `json:"servingUnset"`
		Terminating  bool     `json:"terminating"`
		Zones        []string `json:"zones"`
		Nodes        []string `json:"nodes"`
	} `json:"endpoints"`
	topologyAnswer `json:",inline"`
	RemoteOnly     bool `json:"remoteOnly"`
	Kproxy         *struct {
		topologyAnswer `json:",inline"`
		Kind           string `json:"kind"`
		Reason         string `json:"reason"`
	} `json:"kproxy"`
}

// topologyAnswer is which endpoints a node uses: for Cluster-policy
// traffic, for Local-policy traffic, and for anything.
type topologyAnswer struct {
	Cluster []string  `json:"cluster"`
	Local   []string  `json:"local"`
	All     *[]string `json:"all"`
}

func (a topologyAnswer) String() string {
	return fmt.Sprintf("cluster %v, local %v, all %v", a.Cluster, a.Local, a.all())
}

// all defaults to cluster and local together.
func (a topologyAnswer) all() []string {
	if a.All != nil {
		return sorted(*a.All)
	}
	return sorted(append(slices.Clone(a.Cluster), a.Local...))
}

func (a topologyAnswer) equal(b topologyAnswer) bool {
	return slices.Equal(sorted(a.Cluster), sorted(b.Cluster)) && slices.Equal(sorted(a.Local), sorted(b.Local)) &&
		slices.Equal(a.all(), b.all())
}

func sorted(ips []string) []string {
	out := slices.Clone(ips)
	slices.SortFunc(out, compareIP)
	return slices.Compact(out)
}

func loadTopologyCases(t *testing.T) []topologyCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/topology-cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []topologyCase
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatalf("topology-cases.yaml: %v", err)
	}
	return cases
}

// objects builds the case's Service and EndpointSlice.
func (c *topologyCase) objects() (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			ClusterIP:             "198.18.0.10",
			Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: c.Service.NodePort}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicy(c.Service.ExternalTrafficPolicy),
		},
	}
	if c.Service.NodePort != 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}
	if p := c.Service.InternalTrafficPolicy; p != "" {
		svc.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicy(p))
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(""), Port: ptr[int32](80)}},
	}
	for _, e := range c.Endpoints {
		ep := discoveryv1.Endpoint{
			Addresses: []string{e.IP},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr(e.Ready), Serving: ptr(e.Serving), Terminating: ptr(e.Terminating),
			},
			NodeName: ptr("node-remote"),
		}
		if e.ServingUnset {
			ep.Conditions.Serving = nil
		}
		if e.Local {
			ep.NodeName = ptr(c.node())
		}
		if len(e.Zones)+len(e.Nodes) > 0 {
			ep.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.Zones {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
			for _, n := range e.Nodes {
				ep.Hints.ForNodes = append(ep.Hints.ForNodes, discoveryv1.ForNode{Name: n})
			}
		}
		slice.Endpoints = append(slice.Endpoints, ep)
	}
	return svc, slice
}

func (c *topologyCase) node() string {
	if c.Node == "" {
		return "node-a"
	}
	return c.Node
}

// kproxyAnswer reads kube-proxy's three sets off kproxy's endpoint flags:
// Cluster where some traffic uses the cluster's endpoints (cluster-IP
// traffic under a Cluster policy, or any service with a node port, whose
// local external traffic is short-circuited to them), and each scope
// traffic can reach (cluster-IP traffic always, external traffic with a
// node port) under a Local policy for Local.
func kproxyAnswer(t *testing.T, spe *messages.ServicePortEndpoints) topologyAnswer {
	t.Helper()
	sp := spe.GetServicePort()
	local := func(p messages.TrafficPolicy) bool { return p == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL }
	externally := sp.GetNodePort() != 0
	usesCluster := !local(sp.GetInternalTrafficPolicy()) || externally
	var cluster, internal, external, all []string
	for _, ep := range spe.GetEndpoints() {
		ip := ep.GetIps()[0]
		used := ep.GetInternal() || ep.GetExternal()
		if ep.GetCluster() && usesCluster {
			cluster = append(cluster, ip)
			used = true
		}
		if ep.GetInternal() {
			internal = append(internal, ip)
		}
		if ep.GetExternal() {
			external = append(external, ip)
		}
		if used {
			all = append(all, ip)
		}
	}
	var a topologyAnswer
	if usesCluster {
		a.Cluster = cluster
	}
	scope := func(p messages.TrafficPolicy, eps []string) {
		if !local(p) {
			if !slices.Equal(sorted(cluster), sorted(eps)) {
				t.Fatalf("a scope under a Cluster policy uses %v, not the cluster endpoints %v", eps, cluster)
			}
			return
		}
		if a.Local != nil && !slices.Equal(sorted(a.Local), sorted(eps)) {
			t.Fatalf("the internal and external scopes differ under one policy: %v and %v", a.Local, eps)
		}
		a.Local = append([]string{}, eps...)
	}
	scope(sp.GetInternalTrafficPolicy(), internal)
	if externally {
		scope(sp.GetExternalTrafficPolicy(), external)
	}
	a.All = &all
	return a
}

// TestTopologyConformance runs kube-proxy's TestCategorizeEndpoints cases
// (and kproxy's own) against kproxy's node-local filtering. A case where
// kproxy answers differently must say so in the data, with its reason;
// the test then holds kproxy to that answer, so a change either way shows.
func TestTopologyConformance(t *testing.T) {
	cases := loadTopologyCases(t)
	var report []string
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			svc, slice := c.objects()
			opts := Options{NodeName: c.node()}
			if c.Zone != nil {
				opts.Zone = *c.Zone
			}
			got := kproxyAnswer(t, buildOne(t, svc, []*discoveryv1.EndpointSlice{slice}, opts))
			want, verdict := c.topologyAnswer, "pass"
			if k := c.Kproxy; k != nil {
				if k.Kind != "deliberate" && k.Kind != "pending" || k.Reason == "" {
					t.Fatalf("kproxy: kind %q, reason %q: want kind deliberate or pending and a reason", k.Kind, k.Reason)
				}
				if c.topologyAnswer.equal(k.topologyAnswer) {
					t.Fatalf("kproxy: the same answer as kube-proxy's; remove the difference")
				}
				want, verdict = k.topologyAnswer, "differs ("+k.Kind+")"
			}
			if !got.equal(want) {
				verdict = "FAIL"
				t.Errorf("kproxy uses %v\nwant %v", got, want)
			}
			report = append(report, fmt.Sprintf("%-14s %s", verdict, c.Name))
		})
	}
	t.Logf("%d cases:\n%s", len(cases), strings.Join(report, "\n"))
}

// When hints cannot be used, kproxy says so with kube-proxy's log lines
// (klog V(2) as debug), so the same grep finds why.
func TestTopologyLogLines(t *testing.T) {
	hinted := func(ip, zone, node string) discoveryv1.Endpoint {
		ep := newEndpoint(ip, "node-b", readyEP)
		ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}, ForNodes: []discoveryv1.ForNode{{Name: node}}}
		return ep
	}
	slice := newSlice("web-1", hinted("192.0.2.1", "zone-a", "node-a"), hinted("192.0.2.2", "zone-b", "node-b"))
	for _, c := range []struct {
		zone string
		want []string
	}{
		{"zone-c", []string{
			`"node":"node-c","message":"Ignoring same-node topology hints for service since no hints were provided for node"`,
			`"zone":"zone-c","message":"Ignoring same-zone topology hints for service since no hints were provided for zone"`,
		}},
		{"", []string{`"label":"topology.kubernetes.io/zone","message":"Ignoring same-zone topology hints for service since node is missing label"`}},
	} {
		var buf strings.Builder
		log := zerolog.New(&buf).Level(zerolog.DebugLevel)
		got := buildOne(t, newService(), []*discoveryv1.EndpointSlice{slice}, Options{NodeName: "node-c", Zone: c.zone, TopologyLog: &log})
		if n := len(got.GetEndpoints()); n != 2 {
			t.Errorf("zone %q: %d endpoints, want both (hints ignored)", c.zone, n)
		}
		for _, w := range c.want {
			if !strings.Contains(buf.String(), `"service":"default/web:http/TCP",`+w) {
				t.Errorf("zone %q: log lacks %s:\n%s", c.zone, w, buf.String())
			}
		}
	}
}
