package datapath

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// dialTimeouts are the per-attempt endpoint dial timeouts, as in kube-proxy's
// userspace proxier: a silent endpoint costs one short attempt, then the
// next endpoint is tried. A timeout is not a failure: a SYN dropped by a
// full accept queue is retransmitted by the kernel only after 1 s, so a
// timed-out endpoint is tried again, with the next, longer timeout, when no
// other is left (a refused or unreachable one is not), and after the
// ladder with its last step, for as long as the kernel itself keeps
// retransmitting a SYN (synTimeout): a client is not reset while a direct
// connect of its own would still be trying.
var dialTimeouts = [...]time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 1 * time.Second, 2 * time.Second}

// TCPProxy forwards connections accepted on one listener to endpoints.
type TCPProxy struct {
	Picker   Picker
	External bool // the listener serves an external address (scope for traffic policy)
	Conns    *ConnTracker
	Stats    *Stats  // the service port's counters; nil counts nothing
	Limits   *Limits // connection bounds; nil bounds nothing
	// KeepAlive probes both peers after this long without traffic, so
	// vanished hosts are noticed; 0 turns it off.
	KeepAlive time.Duration
	// Reaper closes idle and half-closed connections; nil closes none.
	Reaper *IdleReaper
	Faults *Faults // nil unless fault injection is on
	// Log is the process's logger, shared (a zerolog.Logger is 112
	// bytes, held per listener); nil logs nothing. Events name
	// ServicePort and Listen (not a logger per listener with those
	// fields: zerolog's With allocates a 500-byte buffer each time).
	Log    *zerolog.Logger
	Listen string
	// Tracer traces connections, sampled by its provider; nil traces
	// none. ServicePort names them.
	Tracer      trace.Tracer
	ServicePort string
	// OnFirstAccept, when set, is called after the first accept.
	OnFirstAccept func()
	// ParkAfter, when positive, makes Serve return errIdle once no
	// connection came for that long (between ParkAfter and twice it), so
	// the listener can wait without a goroutine (Listener).
	ParkAfter time.Duration
	// ProxyProtocol, when 1 or 2, writes a PROXY protocol header of that
	// version to the endpoint before the client's bytes.
	ProxyProtocol int
	// Redirected: kernel rules redirect connections to this listener (a
	// proxy port), so the service address is their original destination.
	Redirected bool
	// Transparent dials node-local endpoints from the client's own
	// address (IP_TRANSPARENT, TransparentMark); others, and a dial the
	// kernel refuses, from the node's.
	Transparent bool
	// PodClients, when set, dials every endpoint of a client that is a pod
	// of this node from the client's address (transparentSource).
	PodClients *PodClients
	// EventLoops moves connections that need only their bytes moved to
	// the event loops (Linux; usesLoops says which).
	EventLoops bool

	// keeper, when set, holds the listening socket; keepsConns: every
	// connection too (adopt.go).
	keeper     SocketKeeper
	keepsConns bool

	acceptor     atomic.Pointer[loopAcceptor] // while served by the loops
	keepAliveSet bool                         // the listener's keepalive is on: Serve runs again after parking
	dialersOnce  sync.Once
	dialers      *dialerLadder
}

// dialerLadder is a dialer per attempt of dialTimeouts.
type dialerLadder [len(dialTimeouts)]*net.Dialer

// dialerLadders are shared by every TCPProxy with the same keepalive: a
// net.Dialer is safe for concurrent use, and a ladder of its own would be
// held by every listener that ever had a connection.
var dialerLadders sync.Map // time.Duration -> *dialerLadder

func ladderFor(keepAlive time.Duration) *dialerLadder {
	if l, ok := dialerLadders.Load(keepAlive); ok {
		return l.(*dialerLadder)
	}
	l := &dialerLadder{}
	for j, t := range dialTimeouts {
		l[j] = keepAliveDialer(keepAlive, t)
	}
	actual, _ := dialerLadders.LoadOrStore(keepAlive, l)
	return actual.(*dialerLadder)
}

// Process-wide: one warning per interval for all listeners is plenty.
var acceptErrors, connLimitHits, flowLimitHits RateLog

// Serve accepts until the listener fails or is closed, or until stop is
// closed and the listener's deadline fires (a pause: the socket stays open
// and its backlog waits for the next Serve). Each connection is handled in
// its own goroutine (one kept from an earlier connection when one is idle:
// workers), which also dials the endpoint, so a slow or dead endpoint never
// stalls accept. The returned error is the accept error.
func (p *TCPProxy) Serve(ln *net.TCPListener, stop <-chan struct{}) error {
	p.listenerKeepAlive(ln)
	if p.usesLoops() {
		if served, err := p.serveLoops(ln, stop); served {
			return err
		}
	}
	// The idle check is a deadline, set again only when it fires after
	// an accept, so a busy listener pays nothing per connection for it.
	// The deadline is set before stop is checked: Pause closes stop, then
	// sets a past deadline, so either this sees stop closed or Pause's
	// deadline replaces this one.
	accepted := false
	if p.ParkAfter > 0 {
		ln.SetDeadline(time.Now().Add(p.ParkAfter))
		if stopped(stop) {
			return nil
		}
	}
	for {
		conn, err := p.accept(ln)
		if err != nil {
			if isTimeout(err) {
				if stopped(stop) {
					return nil // paused
				}
				if p.ParkAfter > 0 {
					if !accepted {
						return errIdle
					}
					accepted = false
					ln.SetDeadline(time.Now().Add(p.ParkAfter))
					if stopped(stop) {
						return nil
					}
				}
				continue
			}
			if isTemporaryAcceptError(err) {
				// fd exhaustion (EMFILE/ENFILE): back off briefly, keep the listener.
				if ok, held := acceptErrors.Allow(); ok {
					p.event(p.log().Warn()).Err(err).Int64("suppressed", held).Msg("accept failed, retrying")
				}
				p.Stats.acceptFailed()
				time.Sleep(50 * time.Millisecond)
				if stopped(stop) {
					return nil // paused meanwhile
				}
				continue
			}
			return err
		}
		accepted = true
		if !p.Limits.AcquireConn(p.Stats) {
			if ok, held := connLimitHits.Allow(); ok {
				p.event(p.log().Warn()).Int64("suppressed", held).Msg("connection limit reached: new connections are reset")
			}
			reset(conn)
			continue
		}
		if p.OnFirstAccept != nil {
			p.OnFirstAccept()
			p.OnFirstAccept = nil
		}
		// Counted as dialing before the accept loop goes on: a shutdown
		// that stopped this loop (Listeners.StopAccepting) then waits for
		// every connection it accepted to have its endpoint.
		p.Conns.DialStart()
		workers.Go(task{p: p, conn: conn, seed: dialSeed{kept: p.keepAccepted(conn)}})
	}
}

// listenerKeepAlive turns on keepalive for clients on the listening
// socket, once. Listener.Serve calls it before the socket is parked: a
// connection the kernel completes inherits the listener's options then,
// not when it is accepted, so one queued while parked would go without.
func (p *TCPProxy) listenerKeepAlive(ln *net.TCPListener) {
	if p.KeepAlive <= 0 || p.keepAliveSet {
		return
	}
	p.keepAliveSet = true
	if err := setListenerKeepAlive(ln, p.KeepAlive); err != nil {
		p.event(p.log().Warn()).Err(err).Msg("cannot turn on TCP keepalive for clients")
	}
}

// accept accepts the next connection, unless an injected accept fault
// says the process is out of file descriptors (the connection waits in the
// backlog, as with a real EMFILE).
func (p *TCPProxy) accept(ln *net.TCPListener) (*net.TCPConn, error) {
	if err := p.Faults.AcceptFault(p.ServicePort); err != nil {
		return nil, err
	}
	return ln.AcceptTCP()
}

// handle serves an accepted connection, which Serve counted as dialing;
// its dial goes on from seed (endpoints an event loop tried already).
func (p *TCPProxy) handle(client *net.TCPConn, seed dialSeed) {
	dialing := true
	ref := p.keptRef(seed.kept)
	defer func() {
		if dialing {
			p.Conns.DialDone()
		}
		if r := recover(); r != nil {
			p.event(p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
			client.Close()
			ref.drop(p)
		}
	}()
	defer p.Conns.Track(p.guard(client, ref)).Release()
	defer p.Limits.ReleaseConn(p.Stats) // acquired by Serve

	clientIP := ""
	if a, ok := client.RemoteAddr().(*net.TCPAddr); ok {
		clientIP = a.IP.String()
	}
	ct := p.traceConn(client)
	backend, err := p.dial(client, clientIP, ct, seed)
	p.Conns.DialDone()
	dialing = false
	if err != nil {
		p.event(p.log().Debug()).Err(err).Str("client", clientIP).Msg("no endpoint reachable, resetting connection")
		ct.failed(err)
		ref.reset(p, client)
		return
	}
	ct.established(backend)
	defer p.Conns.Track(p.guard(backend, ref)).Release()
	if p.ProxyProtocol != 0 {
		if err := p.sendProxyHeader(client, backend); err != nil {
			p.event(p.log().Warn()).Err(err).Str("client", clientIP).Msg("PROXY header not sent, resetting connection")
			ref.reset(p, client)
			backend.Close()
			return
		}
	}
	ref.keep(p, client, backend)
	pr := p.Reaper.Track(client, backend, p.lazyKeepAlive())
	pr.proxy, pr.kp = p, ref.pipes()
	defer p.Reaper.Untrack(pr)
	toBackend, toClient, clientFirst := splicePair(pr)
	ref.drop(p)
	p.Stats.copied(toBackend, toClient)
	ct.closed(toBackend, toClient, clientFirst)
}

// lazyKeepAlive is the backend keepalive the reaper turns on at its next
// sweep, or 0 when the dial turns it on (no reaper) or none is wanted.
func (p *TCPProxy) lazyKeepAlive() time.Duration {
	if p.Reaper.Sweeping() {
		return p.KeepAlive
	}
	return 0
}

// dialer is the dialer of the attempt with timeout dialTimeouts[i]: with
// keepalive when the reaper does not turn it on later.
func (p *TCPProxy) dialer(i int) *net.Dialer {
	p.dialersOnce.Do(func() {
		ka := p.KeepAlive
		if p.lazyKeepAlive() > 0 {
			ka = 0
		}
		p.dialers = ladderFor(ka)
	})
	return p.dialers[i]
}

// dialEndpoint dials addr ("ip:port"). Not Dialer.DialTCP with netip
// addresses: it binds an unset local address to 0.0.0.0:0 before the
// connect, so the kernel picks the source port without the destination
// and the ephemeral ports run out under connection churn.
func (p *TCPProxy) dialEndpoint(i int, addr string) (*net.TCPConn, error) {
	c, err := p.dialer(i).Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// dial picks endpoints until one answers, every endpoint refused, or the
// time is up: the ladder, then as long as the kernel would retransmit a
// SYN (see dialTimeouts). An endpoint that refused or is unreachable is
// not picked again; one that timed out is passed over while others are
// left, then tried again with the next timeout. A refusal takes no step
// of the ladder (it took no time), so every endpoint gets its chance.
func (p *TCPProxy) dial(client *net.TCPConn, clientIP string, ct *connTrace, seed dialSeed) (*net.TCPConn, error) {
	d := seed
	d.exclude = slices.Clip(d.exclude)
	var giveUp time.Time // set by the first timeout
	if d.rung > 0 {
		giveUp = time.Now().Add(synTimeout() - dialTimeouts[0])
	}
	for d.rung < len(dialTimeouts) || time.Now().Before(giveUp) {
		start := ct.now()
		pick, err := d.pick(p, clientIP)
		ct.picked(start, pick, d.exclude, err)
		if err != nil {
			return nil, err
		}
		addr := pick.Endpoint
		step := min(d.rung, len(dialTimeouts)-1)
		timeout := dialTimeouts[step]
		err = p.Faults.Before(addr, timeout)
		var conn *net.TCPConn
		if err == nil {
			if src, ok := p.tcpTransparentSource(client, pick); ok {
				conn, err = p.dialFrom(step, src, addr)
			} else {
				conn, err = p.dialEndpoint(step, addr)
			}
		}
		if err != nil || pick.Report {
			p.Picker.Dialed(addr, err)
		}
		if err == nil {
			return conn, nil
		}
		p.Stats.dialFailed()
		ct.dialFailed(addr, err)
		p.event(p.log().Debug()).Err(err).Str("endpoint", addr).Dur("timeout", timeout).Msg("dial endpoint failed, trying next")
		if !isTimeout(err) {
			d.refusedBy(addr, err)
			continue
		}
		if d.rung == 0 {
			giveUp = time.Now().Add(synTimeout() - timeout)
		}
		d.timedOut(addr, err)
		if client != nil && clientGone(client) {
			return nil, fmt.Errorf("client gone while dialing: %w", err)
		}
	}
	return nil, fmt.Errorf("dial endpoints: %w", d.lastErr)
}

// dialSeed is a dial's ladder: what one client's dial has learnt so far,
// on either data path (the event loops hand it to the goroutine path with
// it): the endpoints refused (the first refused of exclude) and timed out,
// the ladder's step, and the last error. The zero seed is a fresh dial.
// exclude is never written where a Picker was shown it (a request to the
// Balancer that timed out may still be reading it): each change makes a
// new slice.
type dialSeed struct {
	exclude []string
	refused int
	rung    int
	lastErr error
	kept    string // the socket keeper holds the client's socket under this ID ("": not kept)
}

// pick asks p's Picker for an endpoint not excluded. When only slow ones
// are left (the kernel would still be retransmitting their SYNs), it asks
// again with the refused ones excluded only: their next dial has a longer
// timeout. An error says the last dial's too.
func (d *dialSeed) pick(p *TCPProxy, clientIP string) (Pick, error) {
	pick, err := p.Picker.Pick(clientIP, d.exclude, p.External)
	if errors.Is(err, ErrNoEndpoints) && len(d.exclude) > d.refused {
		d.exclude = slices.Clip(d.exclude[:d.refused])
		pick, err = p.Picker.Pick(clientIP, d.exclude, p.External)
	}
	if err == nil && slices.Contains(d.exclude[:d.refused], pick.Endpoint) {
		err = ErrNoEndpoints // a Picker that ignores exclusions: do not spin
	}
	if err != nil && d.lastErr != nil {
		err = fmt.Errorf("%w (last dial error: %v)", err, d.lastErr)
	}
	return pick, err
}

// refusedBy notes that addr refused (or could not be reached): it is not
// picked again. A refusal takes no step of the ladder (it took no time).
func (d *dialSeed) refusedBy(addr string, err error) {
	d.lastErr = err
	d.exclude = slices.Insert(slices.Clip(d.exclude), d.refused, addr)
	d.refused++
}

// timedOut notes that addr did not answer within the step's timeout: it
// is passed over while others are left, and the ladder steps up.
func (d *dialSeed) timedOut(addr string, err error) {
	d.lastErr = err
	d.exclude = append(slices.Clip(d.exclude), addr)
	d.rung++
}

// splicePair copies both ways between a proxied connection's two sockets
// until both directions end, propagating half-close, and returns the bytes
// copied each way and whether the client's side ended first. It marks the
// pair half-closed when the first direction ends (the idle reaper's
// shorter timeout applies then). The copy is
// spliceCopy: splice(2) on Linux, bytes never cross into user space.
func splicePair(p *pair) (toBackend, toClient int64, clientFirst bool) {
	p.wg.Add(1)
	workers.Go(task{pair: p})
	toClient = copyHalf(p.client, p.backend, p.kp[1], func() bool { return p.halfClosed.Swap(true) })
	p.wg.Wait()
	p.client.Close()
	p.backend.Close()
	return p.toBackend, toClient, p.clientFirst
}

// copyToBackend is the client-to-backend direction of splicePair, on its
// own goroutine (a method, so the pair carries its results and nothing
// more is allocated for them).
func (p *pair) copyToBackend() {
	defer p.wg.Done()
	p.toBackend = copyHalf(p.backend, p.client, p.kp[0], func() bool {
		p.clientFirst = !p.halfClosed.Swap(true)
		return !p.clientFirst
	})
}

// copyHalf copies src to dst, then closes dst's write side so the peer sees EOF
// while the other direction goes on. ended runs as soon as the copy ends,
// before the peer can see it (so the first direction to end is known), and
// reports whether the other direction had ended already: then both sockets
// are about to be closed, which sends dst its FIN, and a shutdown first
// would only cost a system call.
func copyHalf(dst, src *net.TCPConn, via *splicePipe, ended func() (last bool)) int64 {
	n, err := spliceCopy(dst, src, via)
	last := ended()
	if err != nil {
		// An error one way (reset) ends both ways. A kept connection's
		// sockets are shut down first: the socket keeper's copies hold
		// them open past these closes.
		if via != nil {
			dst.CloseWrite()
			src.CloseWrite()
		}
		dst.Close()
		src.Close()
		return n
	}
	if !last || via != nil {
		dst.CloseWrite()
	}
	return n
}

// errIdle is returned by a serving loop that went ParkAfter without
// traffic: its socket can wait in the parking set.
var errIdle = errors.New("idle")

// isTimeout reports a deadline error: Pause sets a past deadline to wake
// the serving goroutine; a dial that got no answer in its time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsTimeout reports whether a dial's error is a timeout (no answer to its
// SYNs), as opposed to a refusal or an unreachable.
func IsTimeout(err error) bool { return err != nil && isTimeout(err) }

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// reset closes with SO_LINGER 0 so the client gets an RST at once.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// nopLog is the logger of a proxy given none.
var nopLog = zerolog.Nop()

func (p *TCPProxy) log() *zerolog.Logger {
	if p.Log == nil {
		return &nopLog
	}
	return p.Log
}

// event names the listener on a log event (nil when the level is off).
func (p *TCPProxy) event(e *zerolog.Event) *zerolog.Event {
	return e.Str("servicePort", p.ServicePort).Str("listen", p.Listen)
}
