package datapath

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// Transparent proxying counters, process-wide.
var (
	transparentConns atomic.Int64
	// transparentFallbacks by reason: the endpoint is on another node, or
	// the dial from the client's address failed (then the node's was used).
	transparentRemote, transparentDialFailed atomic.Int64
	// transparentBypass: the endpoint's reply would not pass through this
	// node's stack (the endpoint is the node itself, or the client shares
	// its link), so the node's address was used.
	transparentBypass atomic.Int64
	// transparentFailures: one warning per interval for all listeners.
	transparentFailures RateLog
)

// TransparentConnections is how many TCP connections and UDP flows
// reached a node-local endpoint from the client's own address.
func TransparentConnections() int64 { return transparentConns.Load() }

// TransparentFallbacks is how many connections of services that preserve
// the client's address reached their endpoint from the node's address
// instead: remote, the endpoint was on another node (its replies would not
// come back through this node); dialFailed, the dial from the client's
// address failed and the node's address was used.
// bypass, the endpoint's reply would not pass through this node's stack
// (see replyBypassesNode).
func TransparentFallbacks() (remote, dialFailed, bypass int64) {
	return transparentRemote.Load(), transparentDialFailed.Load(), transparentBypass.Load()
}

// tcpTransparentSource is transparentSource for a TCP client.
func (p *TCPProxy) tcpTransparentSource(client *net.TCPConn, pick Pick) (netip.Addr, bool) {
	if !p.Transparent && p.PodClients == nil || client == nil {
		return netip.Addr{}, false
	}
	a, ok := client.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return transparentSource(p.Transparent, p.PodClients, a.AddrPort().Addr(), pick)
}

// transparentSource is the address to dial a picked endpoint from: the
// client's, where the endpoint's reply comes back through this node's
// stack, whose transparent rules take it to kproxy's socket. That is so
// for an endpoint on this node (when the service preserves the client's
// address: on), and for any endpoint when the client is a pod of this
// node (pods), whose address routes here. Never for the node's loopback
// (which cannot reach a pod), nor for a client that is the endpoint
// itself (a pod reaching itself through its service would get a packet
// from its own address, which its kernel drops as martian). An endpoint
// whose reply would not pass through this node's stack (replyBypassesNode:
// the node itself, or on the client's own link) is dialled from the
// node's address too.
func transparentSource(on bool, pods *PodClients, client netip.Addr, pick Pick) (netip.Addr, bool) {
	ip := client.Unmap()
	if !on && pods == nil || !ip.IsValid() || ip.IsLoopback() || ip.IsUnspecified() {
		return netip.Addr{}, false
	}
	pod := pods.onNode(ip)
	if !on && !pod {
		return netip.Addr{}, false
	}
	ep, err := netip.ParseAddrPort(pick.Endpoint)
	epIP := ep.Addr().Unmap()
	if err == nil && epIP == ip {
		return netip.Addr{}, false
	}
	if !pick.Local && !pod {
		transparentRemote.Add(1)
		return netip.Addr{}, false
	}
	// An endpoint elsewhere answers a pod of this node through this node
	// (the pod's address routes here), unless it shares the pod's link.
	if err != nil || replyBypassesNode(ip, epIP) {
		transparentBypass.Add(1)
		return netip.Addr{}, false
	}
	return ip, true
}

// dialFrom dials addr from src's address (port chosen at connect), with
// the dialer's timeout and keepalive; when that fails for a reason other
// than the endpoint's answer (the kernel refused the client's address),
// it dials from the node's address instead and counts the fallback.
func (p *TCPProxy) dialFrom(i int, src netip.Addr, addr string) (*net.TCPConn, error) {
	d := *p.dialer(i)
	d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	d.Control = transparentControl
	network := "tcp6"
	if src.Is4() {
		network = "tcp4"
	}
	c, err := d.Dial(network, addr)
	if err == nil {
		transparentConns.Add(1)
		return c.(*net.TCPConn), nil
	}
	if endpointAnswered(err) {
		return nil, err // refused or timed out: the endpoint's, not the address's
	}
	transparentDialFailed.Add(1)
	if ok, held := transparentFailures.Allow(); ok {
		p.event(p.log().Warn()).Err(err).Str("endpoint", addr).Str("client", src.String()).Int64("suppressed", held).Msg("dial from the client's address failed, dialing from the node's")
	}
	return p.dialEndpoint(i, addr)
}

// dialUDPFrom opens a flow's socket to raddr from src's address (port
// chosen by the kernel); when the kernel refuses the address it opens one
// from the node's and counts the fallback.
func (o *UDPOptions) dialUDPFrom(src netip.Addr, raddr *net.UDPAddr) (*net.UDPConn, error) {
	network := "udp6"
	if src.Is4() {
		network = "udp4"
	}
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: src.AsSlice()}, Control: transparentControl}
	c, err := d.Dial(network, raddr.String())
	if err == nil {
		transparentConns.Add(1)
		return c.(*net.UDPConn), nil
	}
	transparentDialFailed.Add(1)
	if ok, held := transparentFailures.Allow(); ok {
		o.event(o.log().Warn()).Err(err).Str("endpoint", raddr.String()).Str("client", src.String()).Int64("suppressed", held).Msg("dial from the client's address failed, dialing from the node's")
	}
	return net.DialUDP("udp", nil, raddr)
}

// endpointAnswered: the dial's error is the endpoint's (no answer in time,
// refused, unreachable), which the dial ladder handles, rather than the
// kernel refusing to bind or connect from the client's address.
func endpointAnswered(err error) bool {
	return isTimeout(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET)
}
