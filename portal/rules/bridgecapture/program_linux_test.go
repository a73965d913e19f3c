package bridgecapture

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

func TestProgramGolden(t *testing.T) {
	nft := knftables.NewFake(knftables.BridgeFamily, Table)
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	bridges := []Bridge{{Name: "cni0", MAC: mac, Prefixes: []netip.Prefix{
		netip.MustParsePrefix("198.19.1.0/24"), netip.MustParsePrefix("2001:db8:1::/64"),
	}}}
	if err := Program(context.Background(), nft, 0x00800000, bridges); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimLeft(`
add table bridge kproxy
add chain bridge kproxy capture { type filter hook prerouting priority 1 ; }
add rule bridge kproxy capture ip daddr 198.19.1.0/24 meta mark & 0x00800000 != 0x00000000 meta pkttype set host ether daddr set 02:00:00:00:00:01 comment "cni0"
add rule bridge kproxy capture ip6 daddr 2001:db8:1::/64 meta mark & 0x00800000 != 0x00000000 meta pkttype set host ether daddr set 02:00:00:00:00:01 comment "cni0"
`, "\n")
	if got := nft.Dump(); got != want {
		t.Errorf("rules:\n%s\nwant:\n%s", got, want)
	}

	// The bridge gone: its rules go, the chain stays.
	if err := Program(context.Background(), nft, 0x00800000, nil); err != nil {
		t.Fatal(err)
	}
	if got := nft.Dump(); strings.Contains(got, "add rule") || !strings.Contains(got, "add chain bridge kproxy capture") {
		t.Errorf("no bridge left: rules\n%s", got)
	}
	if err := Remove(context.Background(), nft); err != nil {
		t.Fatal(err)
	}
	if got := nft.Dump(); got != "" {
		t.Errorf("removed: rules\n%s", got)
	}
	if err := Remove(context.Background(), nft); err != nil {
		t.Errorf("removing nothing: %v", err)
	}
}
