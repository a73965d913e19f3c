package portal

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// MaxDatagram is the largest UDP payload carried (64 KiB).
const MaxDatagram = 64 * 1024

// DefaultUDPIdleTimeout ends a UDP flow after this long without a datagram
// either way. kube-proxy's userspace mode used 250 ms, which dropped slow DNS
// answers (kubernetes issue 14939); 30 s matches Linux conntrack's default
// for unreplied UDP and outlives any resolver retry.
const DefaultUDPIdleTimeout = 30 * time.Second

// UDPProxy forwards datagrams from clients on one listening socket to
// endpoints. Each client (source ip:port) gets a flow with its own backend
// socket, so replies find their way back and clients do not share state.
// Flows belong to the socket, not to the goroutine serving it, so they live
// on while a Portal restarts.
type UDPProxy struct {
	// pktinfo is set when the socket reports destination addresses, so
	// replies can leave from the address the client sent to.
	pktinfo bool

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

// UDPOptions are what one Serve of a UDP socket uses; flows keep the
// options they were started with.
type UDPOptions struct {
	Picker      Picker
	External    bool
	IdleTimeout time.Duration
	Conns       *ConnTracker
	Stats       *Stats
	Limits      *Limits
	Faults      *Faults
	// Log is the process's logger; events name ServicePort and Listen.
	Log         zerolog.Logger
	ServicePort string
	Listen      string
	// ParkAfter, when positive, makes Serve return errIdle once no
	// datagram came for that long (between ParkAfter and twice it).
	ParkAfter time.Duration
	// Transparent opens a node-local endpoint's flow from the client's
	// own address (see TCPProxy.Transparent).
	Transparent bool
}

// event names the listener on a log event (nil when the level is off).
func (o UDPOptions) event(e *zerolog.Event) *zerolog.Event {
	return e.Str("servicePort", o.ServicePort).Str("listen", o.Listen)
}

type udpFlow struct {
	client   netip.AddrPort
	endpoint string
	backend  *net.UDPConn
	oob      []byte       // control message choosing the reply's source address
	lastUsed atomic.Int64 // unix nanos of the last datagram either way
}

// Serve reads client datagrams until the socket fails or is closed, or
// until stop is closed and the socket's read deadline fires (a pause).
// Flows keep running after Serve returns: they answer through the socket,
// and end when idle or when their endpoint is removed.
func (p *UDPProxy) Serve(conn *net.UDPConn, o UDPOptions, stop <-chan struct{}) error {
	// The 64 KiB buffer is pooled: a parked socket holds none.
	bp := datagramBuffers.Get().(*[]byte)
	defer datagramBuffers.Put(bp)
	buf := *bp
	var oob []byte
	if p.pktinfo {
		oob = make([]byte, pktinfoOOBSize)
	}
	// As in TCPProxy.Serve: the deadline is set before stop is checked.
	read := false
	if o.ParkAfter > 0 {
		conn.SetReadDeadline(time.Now().Add(o.ParkAfter))
		if stopped(stop) {
			return nil
		}
	}
	for {
		n, oobn, _, client, err := conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if isTimeout(err) {
				if stopped(stop) {
					return nil // paused
				}
				if o.ParkAfter > 0 {
					if !read {
						return errIdle
					}
					read = false
					conn.SetReadDeadline(time.Now().Add(o.ParkAfter))
					if stopped(stop) {
						return nil
					}
				}
				continue
			}
			return err
		}
		read = true
		f := p.flow(conn, client, oob[:oobn], &o)
		if f == nil {
			continue // no endpoint: drop, as a kernel proxy would
		}
		f.lastUsed.Store(time.Now().UnixNano())
		if _, err := f.backend.Write(buf[:n]); err != nil {
			o.event(o.Log.Debug()).Err(err).Str("endpoint", f.endpoint).Msg("udp write to endpoint failed")
		}
	}
}

// flow returns the client's flow, starting one if needed.
func (p *UDPProxy) flow(listener *net.UDPConn, client netip.AddrPort, oob []byte, o *UDPOptions) *udpFlow {
	p.mu.Lock()
	f := p.flows[client]
	p.mu.Unlock()
	if f != nil {
		return f
	}
	if !o.Limits.AcquireFlow(o.Stats) {
		if ok, held := flowLimitHits.Allow(); ok {
			o.event(o.Log.Warn()).Int64("suppressed", held).Msg("UDP flow limit reached: datagrams of new clients are dropped")
		}
		return nil
	}
	f = p.startFlow(listener, client, oob, o)
	if f == nil {
		o.Limits.ReleaseFlow(o.Stats)
	}
	return f
}

// startFlow picks an endpoint and opens the flow's backend socket.
func (p *UDPProxy) startFlow(listener *net.UDPConn, client netip.AddrPort, oob []byte, o *UDPOptions) *udpFlow {
	var f *udpFlow
	clientIP := client.Addr().Unmap().String()
	var exclude []string
	for range dialTimeouts {
		pick, err := o.Picker.Pick(clientIP, exclude, o.External)
		if err != nil {
			o.event(o.Log.Debug()).Err(err).Str("client", client.String()).Msg("udp: no endpoint")
			return nil
		}
		addr := pick.Endpoint
		var raddr *net.UDPAddr
		var backend *net.UDPConn
		err = o.Faults.Before(addr, 0)
		if err == nil {
			raddr, err = net.ResolveUDPAddr("udp", addr)
		}
		if err == nil {
			if src, ok := transparentSource(o.Transparent, client.Addr(), pick); ok {
				backend, err = o.dialUDPFrom(src, raddr)
			} else {
				backend, err = net.DialUDP("udp", nil, raddr)
			}
		}
		if err != nil {
			exclude = append(exclude, addr)
			continue
		}
		f = &udpFlow{client: client, endpoint: addr, backend: backend}
		if len(oob) > 0 {
			f.oob = replyOOB(oob)
		}
		f.lastUsed.Store(time.Now().UnixNano())
		p.mu.Lock()
		if p.flows == nil {
			p.flows = map[netip.AddrPort]*udpFlow{}
		}
		p.flows[client] = f
		p.mu.Unlock()
		releaseConn := o.Conns.Add(backend)
		release := func() { releaseConn(); o.Limits.ReleaseFlow(o.Stats) }
		go p.reply(listener, f, release, o.IdleTimeout, *o)
		return f
	}
	return nil
}

// reply copies the endpoint's datagrams back to the client until the flow
// is idle for IdleTimeout or its backend socket is closed.
func (p *UDPProxy) reply(listener *net.UDPConn, f *udpFlow, release func(), idle time.Duration, o UDPOptions) {
	defer func() {
		if r := recover(); r != nil {
			o.event(o.Log.Error()).Interface("panic", r).Msg("udp flow panicked")
		}
		p.mu.Lock()
		if p.flows[f.client] == f {
			delete(p.flows, f.client)
		}
		p.mu.Unlock()
		f.backend.Close()
		release()
	}()
	if idle <= 0 {
		idle = DefaultUDPIdleTimeout
	}
	forward := func(datagram []byte) error {
		f.lastUsed.Store(time.Now().UnixNano())
		_, _, err := listener.WriteMsgUDPAddrPort(datagram, f.oob, f.client)
		return err
	}
	for {
		last := time.Unix(0, f.lastUsed.Load())
		if time.Since(last) >= idle {
			return
		}
		f.backend.SetReadDeadline(last.Add(idle))
		err := readDatagram(f.backend, forward)
		switch {
		case err == nil:
		case isTimeout(err):
			// re-check: the client may have sent since
		case errors.Is(err, net.ErrClosed):
			return // the flow was ended, or the listener closed
		default:
			// ICMP refused and the like: the endpoint may come back
			o.event(o.Log.Debug()).Err(err).Msg("udp flow: read or reply failed")
		}
	}
}

// RetainEndpoints ends flows whose endpoint is no longer in the set.
func (p *UDPProxy) RetainEndpoints(keep func(endpoint string) bool) {
	p.mu.Lock()
	var ended []*udpFlow
	for c, f := range p.flows {
		if !keep(f.endpoint) {
			delete(p.flows, c)
			ended = append(ended, f)
		}
	}
	p.mu.Unlock()
	for _, f := range ended {
		f.backend.Close()
	}
}

// CloseFlows ends every flow (the service port was deleted).
func (p *UDPProxy) CloseFlows() { p.RetainEndpoints(func(string) bool { return false }) }
