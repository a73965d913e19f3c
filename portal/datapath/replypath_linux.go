package datapath

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// lookupEndpointLink asks the kernel how the node routes to ep: a local
// route is the node itself; otherwise the prefixes of the outgoing
// interface's addresses are its link, and the route may go through a
// gateway (another node).
func lookupEndpointLink(ep netip.Addr) (endpointLink, error) {
	routes, err := netlink.RouteGet(ep.AsSlice())
	if err != nil {
		return endpointLink{}, fmt.Errorf("route to endpoint %s: %w", ep, err)
	}
	if len(routes) == 0 {
		return endpointLink{}, fmt.Errorf("route to endpoint %s: none", ep)
	}
	if routes[0].Type == unix.RTN_LOCAL {
		return endpointLink{node: true}, nil
	}
	gateway := routes[0].Gw != nil
	ifi, err := net.InterfaceByIndex(routes[0].LinkIndex)
	if err != nil {
		return endpointLink{}, fmt.Errorf("interface toward endpoint %s: %w", ep, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return endpointLink{}, fmt.Errorf("addresses of %s: %w", ifi.Name, err)
	}
	l := endpointLink{gateway: gateway}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if p, err := netip.ParsePrefix(n.String()); err == nil {
				l.prefixes = append(l.prefixes, p.Masked())
			}
		}
	}
	return l, nil
}
