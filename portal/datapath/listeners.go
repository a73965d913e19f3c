package datapath

import (
	"net"
	"strconv"

	"github.com/kproxy/kproxy/messages"
)

// ListenSpec is one socket a service port listens on.
type ListenSpec struct {
	Network  string // "tcp" or "udp"
	Address  string // "ip:port"
	External bool   // external scope (external/LB IP, NodePort) for traffic policy
	Proxy    bool   // the proxy port that kernel portal rules redirect to
	// Mark is the socket's SO_MARK (0: none): in kernel modes proxy-port
	// sockets carry SocketMark, and redirected traffic reaches only
	// sockets that do, so no other process can take it by binding a
	// proxy port while kproxy is down.
	Mark int
}

// UsesProxyPorts reports whether a service port of mode has a proxy port
// (and a listener on it): the kernel modes redirect to it, netsh keeps
// winuserspace's. The bind portal listens on the service addresses alone:
// one socket per address, no second listener and no ephemeral port.
func UsesProxyPorts(mode string) bool { return mode != ModeBind }

// Transparent reports whether the portal mode's rules bring replies to a
// connection dialled from a client's address back to kproxy: the kernel
// modes (nftables, iptables).
func Transparent(mode string) bool { return mode == ModeNftables || mode == ModeIPTables }

// ListenSpecs lists the sockets for a service port: in every mode but bind
// the proxy port on bindAddress (a dual-stack wildcard in kernel modes when
// bindAddress is unspecified), plus in bind and netsh modes every service
// IP:port and the node port. Bind mode ignores proxy ports.
//
// externalProxyPort, when not zero, is a second proxy port for external
// traffic (kernel modes with externalTrafficPolicy Local), so that its
// connections use the external endpoint scope.
func ListenSpecs(sp *messages.ServicePort, mode, bindAddress string, proxyPort, externalProxyPort int) ([]ListenSpec, error) {
	network, err := Network(sp.GetKey().GetProtocol())
	if err != nil {
		return nil, err
	}
	var specs []ListenSpec
	add := func(ip string, port int, external bool) {
		if port != 0 {
			specs = append(specs, ListenSpec{Network: network, Address: net.JoinHostPort(ip, strconv.Itoa(port)), External: external})
		}
	}
	if UsesProxyPorts(mode) {
		for i, port := range []int{proxyPort, externalProxyPort} {
			if port != 0 {
				specs = append(specs, ProxySpec(network, mode, bindAddress, port, i == 1))
			}
		}
	}
	if mode != ModeBind && mode != ModeNetsh {
		return specs, nil
	}
	port := int(sp.GetPort())
	for _, set := range []struct {
		ips      *messages.IPSet
		external bool
	}{{sp.GetClusterIps(), false}, {sp.GetExternalIps(), true}, {sp.GetLoadBalancerIps(), true}} {
		for _, ip := range set.ips.All() {
			add(ip, port, set.external)
		}
	}
	add(bindAddress, int(sp.GetNodePort()), true)
	return specs, nil
}

// ProxySpec is the socket of a proxy port in mode: on bindAddress (a
// dual-stack wildcard in kernel modes when bindAddress is unspecified),
// with SocketMark in kernel modes. The allocator opens it when it takes
// the port (PortAllocator), and the Portal serves that socket.
func ProxySpec(network, mode, bindAddress string, port int, external bool) ListenSpec {
	host := bindAddress
	if kernelMode(mode) {
		if ip := net.ParseIP(bindAddress); ip == nil || ip.IsUnspecified() {
			// Redirected traffic arrives on whatever address the kernel
			// chose, of either family: one dual-stack wildcard socket.
			host = ""
		}
	}
	spec := ListenSpec{Network: network, Address: net.JoinHostPort(host, strconv.Itoa(port)), External: external, Proxy: true}
	if kernelMode(mode) {
		spec.Mark = SocketMark
	}
	return spec
}
