package datapath

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
	lc    *batchConn // the listening socket's, once served
	// drainIdle, once the socket is no longer read (Drain), ends flows
	// idle this long: their clients' next datagrams go to the next
	// process, and they only wait for their endpoints' answers.
	drainIdle atomic.Int64
	// drained, made by Drain, is closed once no flow is left.
	drained chan struct{}
	// keeper, when set, holds a copy of every flow's socket (udpkeep.go).
	keeper atomic.Pointer[flowKeeper]
	// readsEnded, set by EndReads, makes every reply loop return once it
	// has sent on what it read.
	readsEnded atomic.Bool
}

// noteEmptied closes drained once the last flow is gone; p.mu is held.
func (p *UDPProxy) noteEmptied() {
	if p.drained != nil && len(p.flows) == 0 {
		select {
		case <-p.drained:
		default:
			close(p.drained)
		}
	}
}

// Drained is closed once Drain was called and every flow has ended: the
// socket, no longer read, is of no more use here.
func (p *UDPProxy) Drained() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drained == nil {
		p.drained = make(chan struct{})
		p.noteEmptied()
	}
	return p.drained
}

// UDPDrainIdle is how long a flow of a socket no longer read waits for its
// endpoint's answer: a resolver's timeout (resolv.conf's default, 5 s).
const UDPDrainIdle = 5 * time.Second

// Drain makes the flows end once idle for UDPDrainIdle (the socket is no
// longer read here).
func (p *UDPProxy) Drain() {
	p.drainIdle.Store(int64(UDPDrainIdle))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drained == nil {
		p.drained = make(chan struct{})
	}
	p.noteEmptied()
	for _, f := range p.flows {
		f.backend.SetReadDeadline(time.Unix(0, f.lastUsed.Load()).Add(UDPDrainIdle))
	}
}

// EndReads makes every flow stop reading its endpoint's answers, and
// returns once each has sent on the ones it had read: the socket can
// close with no answer dropped in the process's hands. Answers that come
// later stay queued in the flows' sockets, for the socket keeper's next
// process when it holds copies (a restart in place). It gives up after
// wait (a reply stuck on a full listening socket).
func (p *UDPProxy) EndReads(wait time.Duration) {
	p.readsEnded.Store(true)
	p.mu.Lock()
	for _, f := range p.flows {
		f.backend.SetReadDeadline(time.Now())
	}
	p.mu.Unlock()
	select {
	case <-p.Drained():
	case <-time.After(wait):
	}
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
	Log         *zerolog.Logger // shared; nil logs nothing
	ServicePort string
	Listen      string
	// ParkAfter, when positive, makes Serve return errIdle once no
	// datagram came for that long (between ParkAfter and twice it).
	ParkAfter time.Duration
	// Transparent opens a node-local endpoint's flow from the client's
	// own address (see TCPProxy.Transparent).
	Transparent bool
	// PodClients opens every flow of a pod of this node from its address
	// (see TCPProxy.PodClients).
	PodClients *PodClients
}

// event names the listener on a log event (nil when the level is off).
func (o UDPOptions) log() *zerolog.Logger {
	if o.Log == nil {
		return &nopLog
	}
	return o.Log
}

func (o UDPOptions) event(e *zerolog.Event) *zerolog.Event {
	return e.Str("servicePort", o.ServicePort).Str("listen", o.Listen)
}

type udpFlow struct {
	client     netip.AddrPort
	clientAddr *peerAddr // client, as replies are sent to it
	endpoint   string
	backend    *net.UDPConn
	bc         *batchConn   // backend, read and written in batches
	oob        []byte       // control message choosing the reply's source address
	lastUsed   atomic.Int64 // unix nanos of the last datagram either way
	started    int64        // unix nanos of the first
	replied    atomic.Bool  // the endpoint has answered
	stats      *Stats       // whose flow slot it holds
	// handedOver is set when the flow is ended for a new client's sake
	// (evictUnassured): its slot of the limits is that client's now.
	handedOver atomic.Bool
	// kept is the flow's ID with keeper, which holds a copy of its
	// socket ("": none).
	kept   string
	keeper SocketKeeper
}

// udpAssuredAfter is conntrack's rule for a UDP stream: a flow answered
// and still in use this long after it started is "assured", kept when the
// limit is reached; the others (a DNS query and its answer) may give
// their slot to a new client, as conntrack's early drop evicts entries
// that are not assured when its table is full.
var udpAssuredAfter atomic.Int64 // nanoseconds; tests shorten it

func init() { udpAssuredAfter.Store(int64(2 * time.Second)) }

// assured reports whether f is a stream the limit keeps.
func (f *udpFlow) assured() bool {
	return f.replied.Load() && f.lastUsed.Load()-f.started >= udpAssuredAfter.Load()
}

// evictSample is how many flows evictUnassured looks at: a random few, as
// conntrack's early drop looks at a few entries of one hash bucket, so a
// new client at the limit costs the same however many flows there are.
const evictSample = 8

// datagram is one datagram read: its bytes and, from the listener, its
// sender and control messages. The bytes are the reader's until handle
// returns.
type datagram struct {
	b    []byte
	oob  []byte
	from netip.AddrPort
	sender
}

// forwarder is one Serve's scratch for a batch: the batch's datagrams by
// flow, in order, so each flow's go to its endpoint in one system call.
type forwarder struct {
	flows [udpBatch]*udpFlow
	bufs  [udpBatch][][]byte
	rd    reader
}

// listenerConn is the listening socket's batch reader and writer, made
// once: flows write their replies through it too.
func (p *UDPProxy) listenerConn(conn *net.UDPConn) (*batchConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lc == nil || p.lc.conn != conn {
		lc, err := newBatchConn(conn)
		if err != nil {
			return nil, err
		}
		p.lc = lc
	}
	return p.lc, nil
}

// Serve reads client datagrams until the socket fails or is closed, or
// until stop is closed and the socket's read deadline fires (a pause).
// Flows keep running after Serve returns: they answer through the socket,
// and end when idle or when their endpoint is removed. Where the platform
// allows, datagrams are read and sent many per system call.
func (p *UDPProxy) Serve(conn *net.UDPConn, o UDPOptions, stop <-chan struct{}) error {
	lc, err := p.listenerConn(conn)
	if err != nil {
		return err
	}
	oobSize := 0
	if p.pktinfo {
		oobSize = pktinfoOOBSize
	}
	fw := &forwarder{}
	// As in TCPProxy.Serve: the deadline is set before stop is checked.
	read := false
	if o.ParkAfter > 0 {
		conn.SetReadDeadline(time.Now().Add(o.ParkAfter))
		if stopped(stop) {
			return nil
		}
	}
	handle := func(ds []datagram) {
		read = true
		p.forward(lc, ds, &o, fw)
	}
	for {
		err := lc.read(&fw.rd, oobSize, true, handle)
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
	}
}

// forward sends a batch of client datagrams on to their flows' endpoints:
// each flow's in the order they came, in one system call where batching
// is available. A datagram whose client has no flow and can get none is
// dropped, as a kernel proxy would.
func (p *UDPProxy) forward(listener *batchConn, ds []datagram, o *UDPOptions, fw *forwarder) {
	o.Stats.udpCounts(false).received(len(ds))
	groups := 0
	for _, d := range ds {
		f := p.flowIsolated(listener, &d, o)
		if f == nil {
			continue
		}
		g := 0
		for g < groups && fw.flows[g] != f {
			g++
		}
		if g == groups {
			fw.flows[g], fw.bufs[g] = f, fw.bufs[g][:0]
			groups++
		}
		fw.bufs[g] = append(fw.bufs[g], d.b)
	}
	if groups == 0 {
		return
	}
	now := time.Now().UnixNano()
	rw := writers.Get().(*replyWriter) // pooled: warm, and none held between batches
	for g := range groups {
		fw.flows[g].lastUsed.Store(now)
		p.toEndpoint(fw.flows[g], fw.bufs[g], o, &rw.w)
		fw.flows[g] = nil
		clear(fw.bufs[g]) // hold none of the batch's buffers
	}
	writers.Put(rw)
}

// flowIsolated is flow, with a panic confined to the datagram that caused
// it: the batch's other clients are served.
func (p *UDPProxy) flowIsolated(listener *batchConn, d *datagram, o *UDPOptions) (f *udpFlow) {
	defer func() {
		if r := recover(); r != nil {
			o.event(o.log().Error()).Interface("panic", r).Str("client", d.from.String()).Msg("udp flow panicked")
			f = nil
		}
	}()
	return p.flow(listener, d, o)
}

// toEndpoint writes one flow's datagrams to its endpoint; a panic ends
// only this flow's share of the batch.
func (p *UDPProxy) toEndpoint(f *udpFlow, bufs [][]byte, o *UDPOptions, w *writer) {
	defer func() {
		if r := recover(); r != nil {
			o.event(o.log().Error()).Interface("panic", r).Str("endpoint", f.endpoint).Msg("udp flow panicked")
		}
	}()
	calls, err := f.bc.write(w, bufs, nil, nil)
	o.Stats.udpCounts(false).sent(len(bufs), calls)
	if err != nil {
		o.event(o.log().Debug()).Err(err).Str("endpoint", f.endpoint).Msg("udp write to endpoint failed")
	}
}

// flow returns the client's flow, starting one if needed.
func (p *UDPProxy) flow(listener *batchConn, d *datagram, o *UDPOptions) (f *udpFlow) {
	p.mu.Lock()
	f = p.flows[d.from]
	p.mu.Unlock()
	if f != nil {
		return f
	}
	if !o.Limits.AcquireFlow(o.Stats) && !p.evictUnassured(o.Stats) {
		if ok, held := flowLimitHits.Allow(); ok {
			o.event(o.log().Warn()).Int64("suppressed", held).Msg("UDP flow limit reached: datagrams of new clients are dropped")
		}
		return nil
	}
	// Released unless a flow started, also when starting it panicked.
	defer func() {
		if f == nil {
			o.Limits.ReleaseFlow(o.Stats)
		}
	}()
	return p.startFlow(listener, d, o)
}

// evictUnassured ends the idlest flow that is not assured among a sample
// of this socket's flows that hold a slot of stats, and hands its slot
// to the caller (it is not released). It reports whether it found one.
func (p *UDPProxy) evictUnassured(stats *Stats) bool {
	p.mu.Lock()
	var victim *udpFlow
	n := 0
	for _, f := range p.flows { // Go starts each range at random: a sample
		if n++; n > evictSample {
			break
		}
		if f.stats != stats || f.assured() {
			continue
		}
		if victim == nil || f.lastUsed.Load() < victim.lastUsed.Load() {
			victim = f
		}
	}
	if victim != nil {
		delete(p.flows, victim.client)
		victim.handedOver.Store(true)
		p.noteEmptied()
	}
	p.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.backend.Close() // its reply loop ends, keeping the slot given away
	return true
}

// startFlow picks an endpoint and opens the flow's backend socket.
func (p *UDPProxy) startFlow(listener *batchConn, d *datagram, o *UDPOptions) *udpFlow {
	var f *udpFlow
	client, oob := d.from, d.oob
	clientIP := client.Addr().Unmap().String()
	var exclude []string
	for range dialTimeouts {
		pick, err := o.Picker.Pick(clientIP, exclude, o.External)
		if err != nil {
			o.event(o.log().Debug()).Err(err).Str("client", client.String()).Msg("udp: no endpoint")
			return nil
		}
		addr := pick.Endpoint
		var raddr *net.UDPAddr
		var backend *net.UDPConn
		var bc *batchConn
		err = o.Faults.Before(addr, 0)
		if err == nil {
			raddr, err = net.ResolveUDPAddr("udp", addr)
		}
		if err == nil {
			if src, ok := transparentSource(o.Transparent, o.PodClients, client.Addr(), pick); ok {
				backend, err = o.dialUDPFrom(src, raddr)
			} else {
				backend, err = net.DialUDP("udp", nil, raddr)
			}
		}
		if err == nil {
			if bc, err = newBatchConn(backend); err != nil {
				backend.Close()
			}
		}
		if err != nil {
			exclude = append(exclude, addr)
			continue
		}
		f = &udpFlow{client: client, clientAddr: peerOf(d), endpoint: addr, backend: backend, bc: bc, stats: o.Stats}
		if len(oob) > 0 {
			f.oob = replyOOB(oob)
		}
		p.keepFlow(f) // before its first datagram goes out: its answer outlives this process
		p.run(listener, f, o)
		return f
	}
	return nil
}

// run adds f, holding a flow slot of o.Limits, to the flow table and
// starts its reply loop.
func (p *UDPProxy) run(listener *batchConn, f *udpFlow, o *UDPOptions) {
	f.started = time.Now().UnixNano()
	f.lastUsed.Store(f.started)
	p.mu.Lock()
	if p.flows == nil {
		p.flows = map[netip.AddrPort]*udpFlow{}
	}
	p.flows[f.client] = f
	p.mu.Unlock()
	releaseConn := o.Conns.Add(f.backend)
	release := func() {
		releaseConn()
		if !f.handedOver.Load() {
			o.Limits.ReleaseFlow(o.Stats)
		}
	}
	go p.reply(listener, f, release, o.IdleTimeout, *o)
}

// writers are the send side's batch scratch, taken per batch: a flow
// waiting for its endpoint holds none.
var writers = sync.Pool{New: func() any { return &replyWriter{} }}

type replyWriter struct {
	w    writer
	bufs [][]byte // grown by coalesced reads (UDP_GRO): kept for the next
}

// reply copies the endpoint's datagrams back to the client until the flow
// is idle for IdleTimeout or its backend socket is closed.
func (p *UDPProxy) reply(listener *batchConn, f *udpFlow, release func(), idle time.Duration, o UDPOptions) {
	defer func() {
		if r := recover(); r != nil {
			o.event(o.log().Error()).Interface("panic", r).Msg("udp flow panicked")
		}
		p.mu.Lock()
		if p.flows[f.client] == f {
			delete(p.flows, f.client)
			p.noteEmptied()
		}
		p.mu.Unlock()
		f.backend.Close()
		f.unkeep()
		release()
	}()
	if idle <= 0 {
		idle = DefaultUDPIdleTimeout
	}
	var werr error
	var rd reader
	counts := o.Stats.udpCounts(true)
	back := func(ds []datagram) {
		f.lastUsed.Store(time.Now().UnixNano())
		f.replied.Store(true)
		counts.received(len(ds))
		rw := writers.Get().(*replyWriter)
		bufs := rw.bufs[:0]
		if bufs == nil {
			bufs = make([][]byte, 0, udpBatch)
		}
		for _, d := range ds {
			bufs = append(bufs, d.b)
		}
		var calls int
		calls, werr = listener.write(&rw.w, bufs, f.clientAddr, f.oob)
		counts.sent(len(bufs), calls)
		clear(bufs)
		rw.bufs = bufs[:0]
		writers.Put(rw)
	}
	for !p.readsEnded.Load() {
		last := time.Unix(0, f.lastUsed.Load())
		limit := idle
		if d := time.Duration(p.drainIdle.Load()); d > 0 && d < limit {
			limit = d
		}
		if time.Since(last) >= limit {
			return
		}
		f.backend.SetReadDeadline(last.Add(limit))
		werr = nil
		err := f.bc.read(&rd, 0, false, back)
		if err == nil {
			err = werr
		}
		switch {
		case err == nil:
		case isTimeout(err):
			// re-check: the client may have sent since
		case errors.Is(err, net.ErrClosed):
			return // the flow was ended, or the listener closed
		default:
			// ICMP refused and the like: the endpoint may come back
			o.event(o.log().Debug()).Err(err).Msg("udp flow: read or reply failed")
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
	p.noteEmptied()
	p.mu.Unlock()
	for _, f := range ended {
		f.backend.Close()
	}
}

// CloseFlows ends every flow (the service port was deleted).
func (p *UDPProxy) CloseFlows() { p.RetainEndpoints(func(string) bool { return false }) }
