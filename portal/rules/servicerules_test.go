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
	rules, err := ForServicePort(sp, 40000, 40001, false, true)
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
	rules, _ = ForServicePort(sp, 40000, 0, false, false)
	for _, r := range rules {
		if r.ProxyPort != 40000 {
			t.Errorf("rule %v: want proxy port 40000", r)
		}
	}
	if _, err := ForServicePort(&messages.ServicePort{Key: &messages.ServicePortKey{Protocol: messages.Protocol_SCTP}}, 1, 0, false, false); err == nil {
		t.Error("SCTP: want an error")
	}
}

func TestRejects(t *testing.T) {
	for _, tc := range []struct {
		name               string
		eps                []*messages.Endpoint
		internal, external bool
	}{
		{"no endpoints", nil, true, true},
		{"both scopes", []*messages.Endpoint{{Internal: true, External: true}}, false, false},
		{"internal only (externalTrafficPolicy Local, none local)", []*messages.Endpoint{{Internal: true}}, false, true},
		{"external only", []*messages.Endpoint{{Internal: true}, {External: true}}, false, false},
		{"external only, no internal", []*messages.Endpoint{{External: true}}, true, false},
	} {
		in, ex := Rejects(tc.eps)
		if in != tc.internal || ex != tc.external {
			t.Errorf("%s: Rejects = %v, %v; want %v, %v", tc.name, in, ex, tc.internal, tc.external)
		}
	}
}

func TestFlattenLeavesClashesOut(t *testing.T) {
	shared := func(sp string, pp int) Rule {
		return Rule{ServicePort: sp, Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: pp}
	}
	own := Rule{ServicePort: "ns/c:http/TCP", Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.3"), Port: 80, ProxyPort: 30003}
	applied := map[string][]Rule{"ns/a:http/TCP": {shared("ns/a:http/TCP", 30001)}}

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
