package conntrack

import (
	"net/netip"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
)

func TestFilterStale(t *testing.T) {
	vip := netip.MustParseAddr("198.18.0.40")
	f := NewFilter([]rules.Rule{
		{Protocol: "udp", IP: vip, Port: 53, ProxyPort: 42001},
		{Protocol: "udp", NodePort: true, Port: 30053, ProxyPort: 42001},
		{Protocol: "udp", IP: netip.MustParseAddr("2001:db8:5::40"), Port: 53, Reject: true},
		{Protocol: "tcp", IP: vip, Port: 80, ProxyPort: 42002},
	})
	ap := netip.MustParseAddrPort
	cases := []struct {
		name              string
		origDst, replySrc string
		want              bool
	}{
		{"NATed to the current proxy port", "198.18.0.40:53", "192.0.2.2:42001", false},
		{"NATed to an old proxy port", "198.18.0.40:53", "192.0.2.2:41001", true},
		{"not NATed: sent before the rule", "198.18.0.40:53", "198.18.0.40:53", true},
		{"IPv4-mapped service IP", "[::ffff:198.18.0.40]:53", "192.0.2.2:41001", true},
		{"another port of the service IP", "198.18.0.40:54", "192.0.2.2:41001", false},
		{"another IP", "198.18.0.41:53", "192.0.2.2:41001", false},
		{"node port, old proxy port", "192.0.2.2:30053", "192.0.2.2:41001", true},
		{"node port, current proxy port", "192.0.2.2:30053", "192.0.2.2:42001", false},
		{"a rejecting rule keeps nothing", "[2001:db8:5::40]:53", "[2001:db8::2]:42001", true},
		{"TCP rules are left out", "198.18.0.40:80", "192.0.2.2:41002", false},
	}
	for _, c := range cases {
		if got := f.Stale(ap(c.origDst), ap(c.replySrc)); got != c.want {
			t.Errorf("%s: Stale(%s, %s) = %v, want %v", c.name, c.origDst, c.replySrc, got, c.want)
		}
	}
	if !NewFilter([]rules.Rule{{Protocol: "tcp", IP: vip, Port: 80}}).Empty() {
		t.Error("a filter of TCP rules only is not empty")
	}
}
