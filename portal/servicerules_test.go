package portal

import (
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
	rules, err := RulesFor(sp, 40000, 40001, false, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]PortalRule{
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
	rules, _ = RulesFor(sp, 40000, 0, false, false)
	for _, r := range rules {
		if r.ProxyPort != 40000 {
			t.Errorf("rule %v: want proxy port 40000", r)
		}
	}
	if _, err := RulesFor(&messages.ServicePort{Key: &messages.ServicePortKey{Protocol: messages.Protocol_SCTP}}, 1, 0, false, false); err == nil {
		t.Error("SCTP: want an error")
	}
}
