package datapath

import (
	"net"
	"net/netip"
)

// With a socket keeper that keeps connections, every UDP flow's socket to
// its endpoint has a copy there from before the flow's first datagram
// goes out, with the client's address and the control message its
// answers leave with. An answer on its way when kproxy is killed (a DNS
// server's, a few milliseconds after the query) queues in the kept
// socket, and the next process adopts the flow and sends it on to the
// client, whose conntrack entry still un-NATs it: a resolver that asks
// once within its deadline gets its answer.

// flowKeeper is the keeper of a UDP socket's flows and the socket's address.
type flowKeeper struct {
	k      SocketKeeper
	listen string
}

// setKeeper makes k keep the flows started from now on (none without k,
// or when k keeps listening sockets only).
func (p *UDPProxy) setKeeper(k SocketKeeper, listen string) {
	if k == nil || !k.KeepsConns() {
		p.keeper.Store(nil)
		return
	}
	p.keeper.Store(&flowKeeper{k: k, listen: listen})
}

// keepFlow gives the keeper a copy of f's socket to its endpoint.
func (p *UDPProxy) keepFlow(f *udpFlow) {
	fk := p.keeper.Load()
	if fk == nil {
		return
	}
	rc, err := f.backend.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { f.kept = fk.k.KeepFlow("udp", fk.listen, f.client.String(), f.oob, int(fd)) })
	if f.kept != "" {
		f.keeper = fk.k
	}
}

// unkeep makes the keeper close its copy of a flow that ended here,
// unless the process stops leaving its flows to the next one.
func (f *udpFlow) unkeep() {
	if f.kept != "" && !f.keeper.Detached() {
		f.keeper.DropConn(f.kept)
	}
}

// adopt serves the flows a killed predecessor left with the keeper k:
// each reads its endpoint's answers again, those queued meanwhile first,
// and sends them to its client through conn, the listening socket.
func (p *UDPProxy) adopt(conn *net.UDPConn, flows []KeptFlow, o UDPOptions, k SocketKeeper) {
	lc, err := p.listenerConn(conn)
	if err != nil {
		dropKeptFlows(k, flows)
		return
	}
	adopted := 0
	for _, kf := range flows {
		f := adoptedFlow(kf)
		if f == nil || !o.Limits.AcquireFlow(o.Stats) {
			if f != nil {
				f.backend.Close()
			}
			k.DropConn(kf.ID)
			continue
		}
		f.stats, f.kept, f.keeper = o.Stats, kf.ID, k
		p.run(lc, f, &o)
		adopted++
	}
	if adopted > 0 {
		o.event(o.log().Info()).Int("flows", adopted).Msg("UDP flows taken over from the socket keeper")
	}
}

// adoptedFlow makes a flow of a kept one (nil when its socket or client
// is not a flow's); kf's descriptor is closed either way.
func adoptedFlow(kf KeptFlow) *udpFlow {
	defer kf.Endpoint.Close()
	client, err := netip.ParseAddrPort(kf.Client)
	if err != nil {
		return nil
	}
	c, err := net.FileConn(kf.Endpoint) // a duplicate, in Go's poller
	if err != nil {
		return nil
	}
	backend, ok := c.(*net.UDPConn)
	if !ok || backend.RemoteAddr() == nil {
		c.Close()
		return nil
	}
	bc, err := newBatchConn(backend)
	if err != nil {
		backend.Close()
		return nil
	}
	return &udpFlow{client: client, clientAddr: peerOfAddrPort(client), endpoint: backend.RemoteAddr().String(),
		backend: backend, bc: bc, oob: kf.Reply}
}

// dropKeptFlows ends kept flows no one serves: closed, and dropped by k.
func dropKeptFlows(k SocketKeeper, flows []KeptFlow) {
	for _, kf := range flows {
		kf.Endpoint.Close()
		if k != nil {
			k.DropConn(kf.ID)
		}
	}
}
