//go:build !linux

package datapath

// The socket keeper, and so kept connections, exist on Linux only.

func (p *TCPProxy) keepConn(int, int) string { return "" }
func (p *TCPProxy) unkeep(string, ...int)    {}
func (p *TCPProxy) leftToKeeper(string) bool { return false }
func (p *TCPProxy) adopt(conns []KeptConn) { dropKeptConns(p.keeper, conns) }

func dropKeptConns(_ SocketKeeper, conns []KeptConn) {
	for _, kc := range conns {
		kc.Client.Close()
		kc.Endpoint.Close()
	}
}
