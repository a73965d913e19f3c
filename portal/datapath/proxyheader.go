package datapath

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/pires/go-proxyproto"
)

// proxyHeaders counts connections proxied with a PROXY protocol header,
// by version (index 1 and 2), process-wide.
var proxyHeaders [3]atomic.Int64

// ProxyHeadersSent is how many connections were proxied with a PROXY
// protocol header of version (1 or 2).
func ProxyHeadersSent(version int) int64 {
	if version < 1 || version > 2 {
		return 0
	}
	return proxyHeaders[version].Load()
}

// ProxyHeader renders the PROXY protocol header (version 1 or 2) of a TCP
// connection from client to the service address dst.
func ProxyHeader(version int, client, dst *net.TCPAddr) ([]byte, error) {
	// Addresses of a dual-stack socket's IPv4 peers are IPv4-mapped; the
	// header carries them as IPv4, as the client sent them.
	client, dst = unmapTCP(client), unmapTCP(dst)
	h := proxyproto.HeaderProxyFromAddrs(byte(version), client, dst)
	if h.TransportProtocol == proxyproto.UNSPEC {
		return nil, fmt.Errorf("PROXY header from %s to %s: not IP addresses", client, dst)
	}
	b, err := h.Format()
	if err != nil {
		return nil, fmt.Errorf("PROXY header v%d from %s to %s: %w", version, client, dst, err)
	}
	return b, nil
}

func unmapTCP(a *net.TCPAddr) *net.TCPAddr {
	if ip4 := a.IP.To4(); ip4 != nil {
		return &net.TCPAddr{IP: ip4, Port: a.Port}
	}
	return a
}

// sendProxyHeader writes the PROXY header of client's connection to backend,
// before any byte of the client's. The service address is where the
// client connected: the original destination of a connection kernel rules
// redirected to a proxy port, else the listener's own address.
func (p *TCPProxy) sendProxyHeader(client, backend *net.TCPConn) error {
	src, _ := client.RemoteAddr().(*net.TCPAddr)
	dst, _ := client.LocalAddr().(*net.TCPAddr)
	if src == nil || dst == nil {
		return fmt.Errorf("PROXY header: connection has no TCP addresses")
	}
	if p.Redirected {
		// A connection with no NAT entry (ENOENT) came to the proxy port
		// itself: its local address is where it went.
		if orig, err := originalDst(client, src.IP.To4() != nil); err == nil {
			dst = orig
		}
	}
	b, err := ProxyHeader(p.ProxyProtocol, src, dst)
	if err != nil {
		return err
	}
	if _, err := backend.Write(b); err != nil {
		return fmt.Errorf("PROXY header: write to endpoint: %w", err)
	}
	proxyHeaders[p.ProxyProtocol].Add(1)
	return nil
}
