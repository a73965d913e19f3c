package datapath

import (
	"net"
	"net/netip"
	"testing"
)

// The kernel's answer for an address of this host is "the node itself";
// for any other routed address, the prefixes of the interface toward it.
func TestLookupEndpointLink(t *testing.T) {
	l, err := lookupEndpointLink(netip.MustParseAddr("127.0.0.1"))
	if err != nil || !l.node {
		t.Fatalf("127.0.0.1: %+v, %v; want the node itself", l, err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n := a.(*net.IPNet)
		ip, _ := netip.AddrFromSlice(n.IP)
		if ip.Unmap().IsLoopback() || ip.IsLinkLocalUnicast() {
			continue
		}
		if l, err := lookupEndpointLink(ip.Unmap()); err != nil || !l.node {
			t.Errorf("this host's %s: %+v, %v; want the node itself", ip, l, err)
		}
	}
}
