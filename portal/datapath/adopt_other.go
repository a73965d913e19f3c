//go:build !linux

package datapath

import "net"

// The socket keeper, and so kept connections, exist on Linux only.

func (p *TCPProxy) keepAccepted(*net.TCPConn) string { return "" }

func (p *TCPProxy) adopt(conns []KeptConn) { dropKeptConns(p.keeper, conns) }

func dropKeptConns(_ SocketKeeper, conns []KeptConn) {
	for _, kc := range conns {
		kc.Client.Close()
		if kc.Endpoint != nil {
			kc.Endpoint.Close()
		}
	}
}

type keptRef struct{ kp [2]*splicePipe }

func (p *TCPProxy) keptRef(string) *keptRef { return nil }

func (*keptRef) pipes() [2]*splicePipe { return [2]*splicePipe{} }

func (*keptRef) keep(*TCPProxy, *net.TCPConn, *net.TCPConn) {}
func (*keptRef) drop(*TCPProxy)                             {}
func (*keptRef) reset(_ *TCPProxy, c *net.TCPConn)          { reset(c) }

func (p *TCPProxy) guard(c *net.TCPConn, _ *keptRef) *net.TCPConn { return c }
