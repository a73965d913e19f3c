package harness

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// The kernel peer's rules, as kube-proxy's nftables mode balances: a
// service map to a chain per service port, numgen over endpoint chains.
func TestKernelDNATRules(t *testing.T) {
	nft := knftables.NewFake(knftables.IPv4Family, kernelTable())
	b := &Backends{IPs: []string{"127.1.0.1", "127.1.0.2"}, TCPPort: 9000, UDPPort: 9053, SinkPort: 9001, HTTPPort: 9080}
	if err := programKernelDNAT(context.Background(), nft, 2, b, []string{ModeConn, ModeKeepAlive, ModeClose, ModeUDP}); err != nil {
		t.Fatal(err)
	}
	dump := nft.Dump()
	for _, want := range []string{
		"add rule ip kproxy-bench-0 output ip daddr . meta l4proto . th dport vmap @services",
		"add rule ip kproxy-bench-0 ep-1-tcp-9000 meta l4proto tcp dnat to 127.1.0.2:9000",
		"add rule ip kproxy-bench-0 ep-0-udp-9053 meta l4proto udp dnat to 127.1.0.1:9053",
		"add rule ip kproxy-bench-0 svc-00001-tcp-8080 numgen inc mod 2 vmap { 0 : goto ep-1-tcp-9000 , 1 : goto ep-0-tcp-9000 }",
		"add element ip kproxy-bench-0 services { 127.8.0.2 . udp . 8053 : goto svc-00001-udp-8053 }",
		"add rule ip kproxy-bench-0 ep-0-tcp-9080 meta l4proto tcp dnat to 127.1.0.1:9080",
		"add element ip kproxy-bench-0 services { 127.8.0.1 . tcp . 8082 : goto svc-00000-tcp-8082 }",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("rules lack %q:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "8081") {
		t.Errorf("bulk rules without the bulk mode:\n%s", dump)
	}
	// Programming again replaces the table (a run that died left one).
	if err := programKernelDNAT(context.Background(), nft, 1, b, []string{ModeConn}); err != nil {
		t.Fatal(err)
	}
	if dump := nft.Dump(); strings.Contains(dump, "svc-00001") || strings.Contains(dump, "udp") {
		t.Errorf("a second programming kept the first one's rules:\n%s", dump)
	}
}
