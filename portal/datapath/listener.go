package datapath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// Listener is one open socket. It is served by at most one goroutine at a
// time; Pause stops that goroutine but keeps the socket, so a restarting
// Portal loses no queued connection or datagram and its UDP flows live on.
//
// On Linux an idle served socket has no goroutine at all: after ParkAfter
// without a connection or datagram its loop returns and the socket waits in
// the parking set (park_linux.go), which starts the loop again when the
// socket becomes readable. Serving is then one of: running (a goroutine in
// the loop), parked (no goroutine, armed in the parking set), or neither
// (the loop ended on an error it reported).
type Listener struct {
	Spec ListenSpec
	tcp  *net.TCPListener
	udp  *net.UDPConn
	// flows of a UDP socket; they outlive any one serving goroutine.
	flows *UDPProxy
	// fd is the socket's descriptor, for the parking set.
	fd uintptr
	// keeper holds a copy of the socket (nil: none).
	keeper SocketKeeper
	// adopt are the established connections the keeper held with the
	// socket (a killed predecessor's), served from the first Serve.
	adopt []KeptConn
	// adoptFlows are the UDP flows the keeper held with the socket,
	// served from the first Serve.
	adoptFlows []KeptFlow

	// ctl makes Serve and Pause one at a time (each waits for a loop to
	// return); mu guards the serving state and is held only briefly, as
	// the parking set's goroutine and a loop going idle take it too.
	ctl        sync.Mutex
	mu         sync.Mutex
	serving    bool          // between Serve and Pause
	stop       chan struct{} // closed by Pause
	done       chan struct{} // closed when the running loop returns; nil when none runs
	parked     bool          // armed in the parking set, no goroutine
	registered bool          // in the parking set, armed or not
	// loop is one run of this Serve's accept (or read) loop; it returns
	// errIdle after ParkAfter without traffic.
	loop      func(stop <-chan struct{}) error
	proxy     *TCPProxy // this Serve's, for a TCP socket
	onFailure func(spec ListenSpec, err error)
	closed    atomic.Bool
	// gate holds the first wake while the set's start is held (nil: none).
	gate *startGate
}

// DefaultParkAfter is how long a served socket goes without a connection
// or datagram before its goroutine ends and it waits in the parking set
// (Linux). Waking it costs a goroutine start and two epoll_ctl calls, far
// less than a connection, so a few seconds keeps busy sockets running and
// frees idle ones soon.
const DefaultParkAfter = 2 * time.Second

// ListenerOptions are what one serving goroutine uses.
type ListenerOptions struct {
	Picker         Picker
	Conns          *ConnTracker
	Stats          *Stats  // the service port's counters; nil counts nothing
	Limits         *Limits // connection and flow bounds; nil bounds nothing
	TCPKeepAlive   time.Duration
	Reaper         *IdleReaper
	UDPIdleTimeout time.Duration
	Log            *zerolog.Logger // shared by every listener; nil logs nothing
	// Faults, when set, injects endpoint dial faults (off by default).
	Faults *Faults
	// Tracer traces connections (sampled by its provider); nil traces
	// none. ServicePort names them.
	Tracer      trace.Tracer
	ServicePort string
	// ProxyProtocol, when 1 or 2, sends endpoints a PROXY protocol header
	// of that version on every TCP connection.
	ProxyProtocol int
	// Transparent dials node-local endpoints from the client's address
	// (TCP and UDP; kernel modes, whose rules route the replies back).
	Transparent bool
	// PodClients, when set, dials every endpoint of a pod of this node
	// from the pod's address (kernel modes).
	PodClients *PodClients
	// OnFirstAccept, when set, is called once a TCP listener accepts its
	// first connection (a restarted Portal's restart-to-serving span).
	OnFirstAccept func()
	// OnFailure is called from the serving goroutine when the socket fails
	// (not when it is closed or paused), or when that goroutine panics.
	OnFailure func(spec ListenSpec, err error)
	// EventLoops serves TCP connections that need only their bytes moved
	// on the event loops (Linux), not a goroutine per direction.
	EventLoops bool
	// ParkAfter is how long the socket may be idle before its goroutine
	// ends and it is parked (Linux); 0 means DefaultParkAfter, negative
	// never parks.
	ParkAfter time.Duration
}

// Open binds the socket of spec; Serve starts serving it.
func Open(spec ListenSpec) (*Listener, error) {
	l := &Listener{Spec: spec}
	switch spec.Network {
	case "tcp":
		// No keepalive probes on proxied connections: a userspace proxy
		// sets 4 socket options per connection for them, the clients and
		// endpoints run their own.
		lc := &net.ListenConfig{KeepAlive: -1, Control: socketOptions(spec.Mark)}
		lc.SetMultipathTCP(false)
		ln, err := lc.Listen(context.Background(), "tcp", spec.Address)
		if err != nil {
			return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
		}
		l.tcp = ln.(*net.TCPListener)
	case "udp":
		pc, err := (&net.ListenConfig{Control: socketOptions(spec.Mark)}).ListenPacket(context.Background(), "udp", spec.Address)
		if err != nil {
			return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
		}
		conn := pc.(*net.UDPConn)
		l.udp, l.flows = conn, &UDPProxy{pktinfo: enablePktinfo(conn)}
	default:
		return nil, fmt.Errorf("open portal %s: %w", spec.Address, ErrUnsupportedProtocol)
	}
	if err := l.takeFD(); err != nil {
		l.Close()
		return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
	}
	return l, nil
}

// takeFD records the socket's descriptor. A TCP socket gets TCP_NODELAY,
// which the connections accepted from it inherit (nodelay_linux.go), set
// here, at the socket's opening or taking over: a connection queued
// before the socket is served is accepted with it too.
func (l *Listener) takeFD() error {
	rc, err := l.rawConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) {
		l.fd = fd
		if l.tcp != nil {
			setNoDelay(int(fd))
		}
	})
}

// Serve serves the socket with o, replacing (pausing) the serving before.
// Where sockets can be parked it starts parked: the first connection or
// datagram, or one already queued, starts its goroutine.
func (l *Listener) Serve(o ListenerOptions) {
	l.ctl.Lock()
	defer l.ctl.Unlock()
	l.pause()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return
	}
	parkAfter := o.ParkAfter
	if parkAfter == 0 {
		parkAfter = DefaultParkAfter
	}
	if !parkingSupported {
		parkAfter = 0
	}
	parkAfter = max(parkAfter, 0)
	// One proxy for every run of the loop under these options: it keeps
	// OnFirstAccept's once and the dialers across parking.
	if l.tcp != nil {
		tcp := &TCPProxy{Picker: o.Picker, External: l.Spec.External, Conns: o.Conns, Stats: o.Stats, Limits: o.Limits,
			KeepAlive: o.TCPKeepAlive, Reaper: o.Reaper, Faults: o.Faults, Log: o.Log, Listen: l.Spec.Address,
			Tracer: o.Tracer, ServicePort: o.ServicePort, OnFirstAccept: o.OnFirstAccept, ParkAfter: parkAfter,
			ProxyProtocol: o.ProxyProtocol, Redirected: l.Spec.Proxy, Transparent: o.Transparent, PodClients: o.PodClients, EventLoops: o.EventLoops}
		tcp.listenerKeepAlive(l.tcp) // before parking: queued connections inherit it
		tcp.keeper = l.keeper
		tcp.keepsConns = l.keeper != nil && l.keeper.KeepsConns()
		if l.adopt != nil {
			tcp.adopt(l.adopt)
			l.adopt = nil
		}
		l.proxy = tcp
		l.loop = func(stop <-chan struct{}) error { return tcp.Serve(l.tcp, stop) }
	} else {
		uo := UDPOptions{Picker: o.Picker, External: l.Spec.External,
			IdleTimeout: o.UDPIdleTimeout, Conns: o.Conns, Stats: o.Stats, Limits: o.Limits, Faults: o.Faults, Log: o.Log,
			ServicePort: o.ServicePort, Listen: l.Spec.Address, ParkAfter: parkAfter, Transparent: o.Transparent, PodClients: o.PodClients}
		if l.adoptFlows != nil {
			l.flows.adopt(l.udp, l.adoptFlows, uo, l.keeper)
			l.adoptFlows = nil
		}
		l.loop = func(stop <-chan struct{}) error { return l.flows.Serve(l.udp, uo, stop) }
	}
	l.serving, l.stop, l.onFailure = true, make(chan struct{}), o.OnFailure
	if parkAfter == 0 || l.parkLocked() != nil {
		l.runLocked()
	}
}

// parkLocked arms the socket in the parking set; l.mu is held.
func (l *Listener) parkLocked() error {
	if err := park(l); err != nil {
		return err
	}
	l.parked = true
	return nil
}

// wake starts the loop of a parked listener whose socket became readable
// (called by the parking set's goroutine).
func (l *Listener) wake() {
	if l.gate != nil && !l.gate.admit(l) {
		return // woken again when serving starts
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.parked {
		return // paused, closed or running meanwhile: a stale event
	}
	l.runLocked()
}

// runningLoops counts the serving loops running, a goroutine each (a
// parked listener has none).
var runningLoops atomic.Int64

// RunningLoops is how many listeners have a serving goroutine now: where
// sockets park, those with traffic in the last ParkAfter or so.
func RunningLoops() int64 { return runningLoops.Load() }

// runLocked starts a goroutine running the loop; l.mu is held. When the
// loop returns idle, the goroutine parks the socket, unless Pause or
// Close came first.
func (l *Listener) runLocked() {
	stop, done, loop, onFailure := l.stop, make(chan struct{}), l.loop, l.onFailure
	l.done, l.parked = done, false
	runningLoops.Add(1)
	go func() {
		defer close(done)
		defer runningLoops.Add(-1)
		defer func() {
			if r := recover(); r != nil && onFailure != nil {
				onFailure(l.Spec, fmt.Errorf("serving goroutine panicked: %v", r))
			}
		}()
		err := loop(stop)
		if errors.Is(err, errIdle) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if stopped(stop) || l.closed.Load() {
				return // Pause waits for done; Close has unparked
			}
			if l.parkLocked() == nil {
				l.done = nil
				return
			}
			l.runLocked() // cannot park: serve on, and try again when idle
			return
		}
		if err != nil && !l.closed.Load() && onFailure != nil {
			onFailure(l.Spec, err)
		}
	}()
}

// Pause stops the serving goroutine and waits for it, or takes a parked
// socket out of the parking set; the socket stays open, and connections and
// datagrams queue in the kernel until the next Serve.
func (l *Listener) Pause() {
	l.ctl.Lock()
	defer l.ctl.Unlock()
	l.pause()
}

// pause is Pause with l.ctl held.
func (l *Listener) pause() {
	l.mu.Lock()
	if !l.serving {
		l.mu.Unlock()
		return
	}
	l.serving, l.parked = false, false
	close(l.stop)
	// Out of the set under l.mu: a wakeup already read finds the listener
	// not parked and does nothing.
	unpark(l)
	done := l.done
	l.done = nil
	l.mu.Unlock()
	if done == nil {
		return // parked, or the loop ended on an error
	}
	// A deadline in the past wakes the blocked Accept/Read; the loop
	// sees stop closed.
	l.setDeadline(time.Unix(1, 0))
	<-done
	l.setDeadline(time.Time{})
}

func (l *Listener) setDeadline(t time.Time) {
	if l.tcp != nil {
		l.tcp.SetDeadline(t)
		l.proxy.setAcceptDeadline(t) // the event loops' accept waits on a duplicate
	} else {
		l.udp.SetReadDeadline(t)
	}
}

// Close closes the socket. Established TCP connections and UDP flows are
// not closed: they belong to their own goroutines.
func (l *Listener) Close() {
	if l.closed.Swap(true) {
		return
	}
	// Out of the parking set before the descriptor is closed and its
	// number reused.
	l.mu.Lock()
	unpark(l)
	l.parked = false
	proxy := l.proxy
	adopt, adoptFlows := l.adopt, l.adoptFlows
	l.adopt, l.adoptFlows = nil, nil
	l.mu.Unlock()
	if adopt != nil {
		dropKeptConns(l.keeper, adopt) // never served: their service port went
	}
	dropKeptFlows(l.keeper, adoptFlows)
	if l.keeper != nil {
		// Closed for good: the keeper's copy must not hold it open.
		l.keeper.Drop(l.Spec.Network, l.Spec.Address)
	}
	if l.tcp != nil {
		proxy.stopLoopAccept() // before its number is free for another socket
		l.tcp.Close()
		proxy.setAcceptDeadline(time.Unix(1, 0)) // wakes the goroutine serving on the loops
	} else {
		l.udp.Close()
	}
}

// Break shuts the TCP listening socket down under its serving goroutine
// (fault injection): the goroutine reports the failure, as for a socket
// the kernel broke.
func (l *Listener) Break() error {
	if l.tcp == nil {
		return fmt.Errorf("break %s: only TCP listeners can be broken", l.Spec.Address)
	}
	rc, err := l.tcp.SyscallConn()
	if err != nil {
		return err
	}
	return breakSocket(rc)
}

// RetainEndpoints ends UDP flows to endpoints no longer in the set.
func (l *Listener) RetainEndpoints(keep func(string) bool) {
	if l.flows != nil {
		l.flows.RetainEndpoints(keep)
	}
}

// CloseFlows ends every UDP flow of this listener.
func (l *Listener) CloseFlows() {
	if l.flows != nil {
		l.flows.CloseFlows()
	}
}

// CloseWhenDrained closes a UDP socket and its flows once the flows have
// ended (after StopReading: at most UDPDrainIdle idle each), or when ctx
// ends; a TCP socket at once. Flows left at ctx's end first send on the
// answers they have read.
func (l *Listener) CloseWhenDrained(ctx context.Context) {
	if l.flows != nil {
		select {
		case <-l.flows.Drained():
		case <-ctx.Done():
			l.flows.EndReads(endReadsWait)
		}
	}
	l.Close()
	l.CloseFlows()
}

// endReadsWait bounds how long flows ending may take to send on what they
// read: a datagram each, unless the listening socket's buffer is full.
const endReadsWait = time.Second

// Listeners is the process's table of open sockets by network address:
// sockets are opened with SO_REUSEPORT (a successor process shares
// them), so the kernel no longer refuses a second socket of this process
// on an address; this table does. Each service port's sockets are a
// Sockets value its record owns and hands to its Portal; the table is
// only where addresses, the open-file limit, the start gate and the
// keeper are kept.
type Listeners struct {
	mu sync.Mutex
	// held is every open socket by network address, with its owner's
	// name (for the error that refuses a second owner). The proxy-port
	// sockets the allocator holds (reserved owners, thousands in kernel
	// modes) are only here.
	held map[netAddr]heldSocket
	// opening are the addresses whose sockets are being opened, by owner:
	// the system calls are made without s.mu, so Portals open theirs at
	// once (one lock over 10,000 openings made them one at a time), and
	// an address being opened counts as held.
	opening map[netAddr]string
	// fdLimit is the open-file limit (0: none); see SetFDLimit.
	fdLimit int64
	// gate, while the start is held (startgate.go), is given to every
	// socket recorded.
	gate *startGate
	// keeper, when set, holds a copy of every socket outside the process
	// (keeper.go).
	keeper SocketKeeper
}

// netAddr is a socket's network and address, sharing its spec's strings.
type netAddr struct{ network, address string }

type heldSocket struct {
	owner string
	l     *Listener
}

// ErrFDLimit means another listening socket would leave too few fds of
// the open-file limit for the control plane and connections.
var ErrFDLimit = errors.New("open-file limit reached")

// SetFDLimit bounds the listening sockets to the open-file limit less the
// control plane's share (ControlPlaneFDs), so the last fds are not taken
// by listeners: beyond it Open fails with ErrFDLimit and a message naming
// the limit, rather than with whatever the kernel says when fds run out
// somewhere else.
func (s *Listeners) SetFDLimit(limit int64) {
	s.mu.Lock()
	s.fdLimit = limit
	s.mu.Unlock()
}

// NewListeners returns an empty set.
func NewListeners() *Listeners {
	return &Listeners{held: map[netAddr]heldSocket{}, opening: map[netAddr]string{}}
}

// Sockets are one service port's open sockets, one or two (a slice:
// smaller than a map per service port). Its record owns them and outlives
// the actors serving them; the methods are safe from any goroutine.
type Sockets struct {
	set   *Listeners
	owner string      // names the holder in the error refusing an address
	ls    []*Listener // under set.mu
}

// Sockets returns an empty Sockets value for owner, which names it in
// errors.
func (s *Listeners) Sockets(owner string) *Sockets {
	return &Sockets{set: s, owner: owner}
}

// Open opens spec's socket and adds it, refusing an address another owner
// of this process holds (EADDRINUSE, as the kernel would without
// SO_REUSEPORT). A proxy port's socket the allocator opened when it took
// the port (reserve) is taken over, not opened again: the port was never
// free between.
func (o *Sockets) Open(spec ListenSpec) (*Listener, error) {
	s := o.set
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[netAddr{spec.Network, spec.Address}]
	if r := reserved(spec.Network); ok && h.owner == r && spec.Proxy {
		if l := h.l; l.Spec.Mark == spec.Mark {
			l.Spec = spec // External: how it is served, not the socket
			s.put(o, l)
			return l, nil
		}
	}
	if ok && h.owner != o.owner {
		return nil, fmt.Errorf("open portal %s/%s: held by %s: %w", spec.Network, spec.Address, h.owner, syscall.EADDRINUSE)
	}
	return s.open(o, spec)
}

// Get returns the socket on addr, or nil.
func (o *Sockets) Get(addr string) *Listener {
	o.set.mu.Lock()
	defer o.set.mu.Unlock()
	return o.get(addr)
}

func (o *Sockets) get(addr string) *Listener {
	for _, l := range o.ls {
		if l.Spec.Address == addr {
			return l
		}
	}
	return nil
}

// Forget removes the socket on addr (the caller closes it).
func (o *Sockets) Forget(addr string) {
	o.set.mu.Lock()
	defer o.set.mu.Unlock()
	if l := o.get(addr); l != nil {
		o.set.delete(o, l)
	}
}

// All returns the sockets as they are now.
func (o *Sockets) All() []*Listener {
	o.set.mu.Lock()
	defer o.set.mu.Unlock()
	return slices.Clone(o.ls)
}

// take removes every socket from o and the table.
func (o *Sockets) take() []*Listener {
	s := o.set
	s.mu.Lock()
	ls := o.ls
	o.ls = nil
	for _, l := range ls {
		s.delete(nil, l)
	}
	s.mu.Unlock()
	return ls
}

// Close closes every socket and its flows, and forgets them.
func (o *Sockets) Close() {
	for _, l := range o.take() {
		l.Close()
		l.CloseFlows()
	}
}

// CloseAfterFlows forgets the sockets and closes the TCP ones now; the UDP
// sockets are returned, for the caller to close once their flows have had
// their replies (a drain).
func (o *Sockets) CloseAfterFlows() (udp []*Listener) {
	for _, l := range o.take() {
		if l.udp != nil {
			udp = append(udp, l)
			continue
		}
		l.Close()
		l.CloseFlows()
	}
	return udp
}

// openSocket is Open (tests make it wait).
var openSocket = Open

// errOpening: the address's socket is being opened for another owner.
func errOpening(spec ListenSpec, owner string) error {
	return fmt.Errorf("open portal %s/%s: being opened for %s: %w", spec.Network, spec.Address, owner, syscall.EADDRINUSE)
}

// reservedPrefix names the owners of proxy ports' sockets not yet served.
const reservedPrefix = "\x00proxy-port/"

// reserved owns the proxy ports' sockets of network from the moment the
// allocator takes a port until a Portal takes the socket over (one per
// network, as TCP and UDP ports are apart).
func reserved(network string) string { return reservedPrefix + network }

// reserve opens a proxy port's socket and holds it for the Portal that
// will serve the port, so nothing else (an outgoing connection's
// ephemeral port, another process's bind) can take the port meanwhile.
// It is counted against the open-file limit as any listener, and held
// only in the table, under the reserved owner's name.
func (s *Listeners) reserve(spec ListenSpec) (*Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open(&Sockets{set: s, owner: reserved(spec.Network)}, spec)
}

// unreserve closes the proxy port socket held for network/address, if no
// Portal took it over.
func (s *Listeners) unreserve(network, address string) {
	s.mu.Lock()
	h, ok := s.held[netAddr{network, address}]
	if !ok || h.owner != reserved(network) {
		s.mu.Unlock()
		return
	}
	s.delete(nil, h.l)
	s.mu.Unlock()
	h.l.Close()
	h.l.CloseFlows()
}

// open opens spec's socket and adds it to o; s.mu is held, and released
// while the socket is opened (the address reserved in s.opening, counted
// against the limit).
func (s *Listeners) open(o *Sockets, spec ListenSpec) (*Listener, error) {
	key := netAddr{spec.Network, spec.Address}
	if other, ok := s.opening[key]; ok {
		return nil, errOpening(spec, other)
	}
	limit, open := s.fdLimit, int64(len(s.held)+len(s.opening))
	if limit > 0 && open >= limit-ControlPlaneFDs(limit) {
		return nil, fmt.Errorf("open portal %s/%s: %d listening sockets are open and the open-file limit (RLIMIT_NOFILE) is %d, of which %d are kept for connections and the control plane: raise the hard limit (systemd LimitNOFILE, ulimit -Hn): %w",
			spec.Network, spec.Address, open, limit, ControlPlaneFDs(limit), ErrFDLimit)
	}
	s.opening[key] = o.owner
	k := s.keeper
	s.mu.Unlock()
	l, err := openKept(k, spec)
	s.mu.Lock()
	delete(s.opening, key)
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			err = fmt.Errorf("%w (%d listening sockets open, open-file limit %d: raise the hard limit, systemd LimitNOFILE, ulimit -Hn)", err, len(s.held), limit)
		}
		return nil, err
	}
	s.put(o, l)
	return l, nil
}

// put records l as o's, in place of o's socket on the same address;
// s.mu is held.
func (s *Listeners) put(o *Sockets, l *Listener) {
	if old := o.get(l.Spec.Address); old != nil {
		s.delete(o, old)
	}
	o.ls = append(o.ls, l)
	s.held[netAddr{l.Spec.Network, l.Spec.Address}] = heldSocket{owner: o.owner, l: l}
	if s.gate != nil {
		l.gate = s.gate
	}
}

// delete forgets l, and removes it from o unless o is nil; s.mu is held.
func (s *Listeners) delete(o *Sockets, l *Listener) {
	key := netAddr{l.Spec.Network, l.Spec.Address}
	if h, ok := s.held[key]; ok && h.l == l {
		delete(s.held, key)
	}
	if o != nil {
		o.ls = slices.DeleteFunc(o.ls, func(x *Listener) bool { return x == l })
	}
}

// HeldBy returns the sockets held by owner (fault injection and tests:
// a lookup over every socket).
func (s *Listeners) HeldBy(owner string) []*Listener {
	return s.heldWhere(func(h heldSocket) bool { return h.owner == owner })
}

// StopAccepting closes every TCP listener (a hand-over: with a successor's
// sockets in the SO_REUSEPORT group, new and queued connections go there)
// and leaves the rest to the owners' shutdown. UDP sockets stay: their
// flows answer clients through them while they drain.
func (s *Listeners) StopAccepting() {
	for _, l := range s.heldWhere(func(h heldSocket) bool { return h.l.tcp != nil }) {
		// Paused first: its accept loop has returned, and every
		// connection it accepted is counted as dialing (WaitDialed).
		l.Pause()
		l.Close()
	}
}

// StopReading pauses every UDP socket: it reads no more datagrams (a
// successor sharing the socket, or the next process taking it from the
// keeper, reads them), while its flows still send their endpoints'
// replies through it until they end (Sockets.CloseAfterFlows).
func (s *Listeners) StopReading() {
	for _, l := range s.heldWhere(func(h heldSocket) bool { return h.l.udp != nil }) {
		l.Pause()
		l.flows.Drain()
	}
}

// heldWhere returns the open sockets for which keep is true (every one
// for nil), as they are now.
func (s *Listeners) heldWhere(keep func(heldSocket) bool) []*Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ls []*Listener
	for _, h := range s.held {
		if keep == nil || keep(h) {
			ls = append(ls, h.l)
		}
	}
	return ls
}

// rawConn is the socket's, for system calls on its descriptor.
func (l *Listener) rawConn() (syscall.RawConn, error) {
	if l.tcp != nil {
		return l.tcp.SyscallConn()
	}
	return l.udp.SyscallConn()
}

// Len is the number of open listeners.
func (s *Listeners) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}
