package rules

import (
	"net/netip"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

func TestRulesForScopes(t *testing.T) {
	sp := &messages.ServicePort{
		Key:             &messages.ServicePortKey{Namespace: "ns", Name: "web", PortName: "http", Protocol: messages.Protocol_TCP},
		Port:            80,
		NodePort:        30080,
		ClusterIps:      &messages.IPSet{V4: []string{"198.18.0.10"}, V6: []string{"2001:db8::10"}},
		ExternalIps:     &messages.IPSet{V4: []string{"192.0.2.50"}},
		LoadBalancerIps: &messages.IPSet{V4: []string{"198.51.100.7"}},
	}
	rules, err := ForServicePort(sp, 40000, 40001, Serve, RejectAll)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Rule{
		"198.18.0.10":  {ProxyPort: 40000},
		"2001:db8::10": {ProxyPort: 40000},
		"192.0.2.50":   {ProxyPort: 40001, Reject: true},
		"198.51.100.7": {ProxyPort: 40001, Reject: true},
		"nodeport":     {ProxyPort: 40001, Reject: true, NodePort: true},
	}
	if len(rules) != len(want) {
		t.Fatalf("got %d rules: %v", len(rules), rules)
	}
	for _, r := range rules {
		k := "nodeport"
		if !r.NodePort {
			k = r.IP.String()
		}
		w, ok := want[k]
		if !ok || r.ProxyPort != w.ProxyPort || r.Reject != w.Reject || r.NodePort != w.NodePort || r.Protocol != "tcp" {
			t.Errorf("rule %v, want %+v", r, w)
		}
		if !r.NodePort && r.Port != 80 || r.NodePort && r.Port != 30080 {
			t.Errorf("rule %v: wrong port", r)
		}
	}
	// Without an external port, external traffic shares the proxy port.
	rules, _ = ForServicePort(sp, 40000, 0, Serve, Serve)
	for _, r := range rules {
		if r.ProxyPort != 40000 {
			t.Errorf("rule %v: want proxy port 40000", r)
		}
	}
	if _, err := ForServicePort(&messages.ServicePort{Key: &messages.ServicePortKey{Protocol: messages.Protocol_SCTP}}, 1, 0, Serve, Serve); err == nil {
		t.Error("SCTP: want an error")
	}
}

func TestVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name               string
		eps                []*messages.Endpoint
		internal, external Verdict
	}{
		{"no endpoints", nil, RejectAll, RejectAll},
		{"both scopes", []*messages.Endpoint{{Internal: true, External: true, Cluster: true}}, Serve, Serve},
		{"externalTrafficPolicy Local, none local", []*messages.Endpoint{{Internal: true, Cluster: true}}, Serve, DropAll},
		{"external only", []*messages.Endpoint{{Internal: true}, {External: true}}, Serve, Serve},
		{"internalTrafficPolicy Local, none local", []*messages.Endpoint{{External: true, Cluster: true}}, DropAll, Serve},
		{"both policies Local, none local", []*messages.Endpoint{{Cluster: true}}, DropAll, DropAll},
	} {
		in, ex := Verdicts(tc.eps)
		if in != tc.internal || ex != tc.external {
			t.Errorf("%s: Verdicts = %v, %v; want %v, %v", tc.name, in, ex, tc.internal, tc.external)
		}
	}
}

func TestShortCircuitAndSourceRanges(t *testing.T) {
	sp := &messages.ServicePort{
		Key:                      &messages.ServicePortKey{Namespace: "ns", Name: "lb", Protocol: messages.Protocol_TCP},
		Port:                     80,
		NodePort:                 30080,
		ClusterIps:               &messages.IPSet{V4: []string{"198.18.0.10"}},
		ExternalIps:              &messages.IPSet{V4: []string{"192.0.2.50"}},
		LoadBalancerIps:          &messages.IPSet{V4: []string{"198.51.100.7"}, V6: []string{"2001:db8::7"}},
		LoadBalancerSourceRanges: []string{"203.0.113.0/24", "2001:db8:1::/48", "192.0.2.2/32"},
		ExternalTrafficPolicy:    messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
	}
	rs, err := ForServicePort(sp, 40000, 40001, Serve, DropAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			t.Errorf("%v: %v", r, err)
		}
		switch {
		case r.ClusterIP:
			if r.ShortCircuitPort != 0 || r.Drop || r.SourceRanges != "" || r.ProxyPort != 40000 {
				t.Errorf("cluster IP rule %v", r)
			}
		default:
			if r.ShortCircuitPort != 40000 || !r.Drop {
				t.Errorf("external rule %v: want drop, short-circuit to 40000", r)
			}
		}
		want := ""
		switch r.IP.String() {
		case "198.51.100.7":
			want = "203.0.113.0/24,192.0.2.2/32"
		case "2001:db8::7":
			want = "2001:db8:1::/48"
		}
		if r.SourceRanges != want {
			t.Errorf("%v: source ranges %q, want %q", r, r.SourceRanges, want)
		}
	}
	// Under internalTrafficPolicy Local too, the second proxy port serves
	// the cluster's endpoints: external traffic from outside shares the
	// first (the same local endpoints), local traffic short-circuits to the
	// second.
	sp.InternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	rs, _ = ForServicePort(sp, 40000, 40001, Serve, Serve)
	for _, r := range rs {
		if !r.ClusterIP && (r.ProxyPort != 40000 || r.ShortCircuitPort != 40001) {
			t.Errorf("both policies Local: %v, want -> :40000, local traffic -> :40001", r)
		}
	}
	// A service without endpoints rejects: no short-circuit.
	sp.InternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_CLUSTER
	rej, _ := ForServicePort(sp, 40000, 40001, RejectAll, RejectAll)
	for _, r := range rej {
		if r.ShortCircuitPort != 0 {
			t.Errorf("%v: want no short-circuit", r)
		}
	}
}

func TestFlattenLeavesClashesOut(t *testing.T) {
	shared := func(sp string, pp int) Rule {
		return Rule{ServicePort: sp, Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: pp}
	}
	own := Rule{ServicePort: "ns/c:http/TCP", Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.3"), Port: 80, ProxyPort: 30003}
	applied := Set{shared("ns/a:http/TCP", 30001).Key(): shared("ns/a:http/TCP", 30001)}

	// b and c change; a holds the shared key and is not changing: b loses it.
	out, clashes := Flatten(map[string][]Rule{
		"ns/b:http/TCP": {shared("ns/b:http/TCP", 30002)},
		"ns/c:http/TCP": {own},
	}, applied)
	if len(out) != 1 || out[0] != own {
		t.Fatalf("Flatten = %v, want only c's rule", out)
	}
	if len(clashes) != 1 || clashes[0].ServicePort != "ns/b:http/TCP" || clashes[0].Owner != "ns/a:http/TCP" {
		t.Fatalf("clashes = %+v, want b against a", clashes)
	}

	// a changes too (a full sync): the first in ID order keeps the key.
	out, clashes = Flatten(map[string][]Rule{
		"ns/b:http/TCP": {shared("ns/b:http/TCP", 30002)},
		"ns/a:http/TCP": {shared("ns/a:http/TCP", 30001)},
	}, applied)
	if len(out) != 1 || out[0].ProxyPort != 30001 || len(clashes) != 1 || clashes[0].ServicePort != "ns/b:http/TCP" {
		t.Fatalf("Flatten = %v, %+v; want a's rule and b clashing", out, clashes)
	}

	// A service port may replace its own rule.
	out, clashes = Flatten(map[string][]Rule{"ns/a:http/TCP": {shared("ns/a:http/TCP", 30009)}}, applied)
	if len(out) != 1 || out[0].ProxyPort != 30009 || len(clashes) != 0 {
		t.Fatalf("Flatten = %v, %+v; want a's new rule", out, clashes)
	}
}
