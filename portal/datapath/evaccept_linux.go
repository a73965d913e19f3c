package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EventLoopsSupported: Linux has the event loops.
const EventLoopsSupported = true

// loopsEverywhere serves every TCPProxy that can on the loops (tests
// run the data path's tests on both).
var loopsEverywhere bool

// usesLoops reports whether p's connections go to the event loops: those
// that need nothing but bytes moved. Tracing, transparent dials, the
// PROXY header and injected faults stay with the goroutine data path.
func (p *TCPProxy) usesLoops() bool {
	return (p.EventLoops || loopsEverywhere) && p.Tracer == nil && !p.Transparent && p.ProxyProtocol == 0 && p.Faults == nil
}

// serveLoops is Serve for the event loops: a loop accepts (accept4, so
// no socket is ever in Go's poller), dials with a nonblocking connect and
// hands each pair to a loop; this goroutine only waits for Pause, for
// the socket to go idle (ParkAfter) or to be closed. served is false
// when it could not start (no loops, no fd): Serve then serves the
// goroutine way.
func (p *TCPProxy) serveLoops(ln *net.TCPListener, stop <-chan struct{}) (served bool, err error) {
	if theLoops() != nil {
		return false, nil
	}
	orig, err := ln.SyscallConn()
	if err != nil {
		return false, nil
	}
	// The loop watches the listening socket itself and accepts inside
	// the listener's Control, which holds its descriptor open: a socket
	// its owner closed is never accepted from, and its number, reused,
	// is never mistaken for it. (A duplicate would cost a descriptor per
	// serving listener, and keep the socket listening after its close.)
	fd := -1
	orig.Control(func(f uintptr) { fd = int(f) })
	if fd < 0 || fd >= len(byFD) {
		return false, nil
	}
	a := &loopAcceptor{p: p, fd: fd, orig: orig, wake: make(chan struct{}, 1), on: true}
	if err := a.start(); err != nil {
		return false, nil
	}
	p.acceptor.Store(a)
	defer func() {
		p.acceptor.Store(nil)
		a.stop()
	}()
	// The acceptor is published before stop is checked, so either this
	// sees stop closed or Pause's wake reaches it.
	if stopped(stop) {
		return true, nil
	}
	// Each wake checks whether the listener was closed (Listener.Close
	// stops the acceptor first; a listener closed by another owner is
	// seen within closeCheck).
	wait := p.ParkAfter
	if wait <= 0 {
		wait = closeCheck
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	seen := a.accepts.Load()
	for {
		idle := false
		select {
		case <-stop:
			return true, nil
		case <-a.wake:
		case <-timer.C:
			now := a.accepts.Load()
			idle, seen = now == seen, now
			timer.Reset(wait)
		}
		switch {
		case orig.Control(func(uintptr) {}) != nil:
			return true, &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: net.ErrClosed}
		case stopped(stop):
			return true, nil
		case a.failed() != nil:
			return true, a.failed()
		case idle && p.ParkAfter > 0:
			return true, errIdle
		}
	}
}

// closeCheck is how often a loop-served listener that does not park
// looks whether its owner closed it.
const closeCheck = time.Second

// loopAcceptor is a listening socket served by a loop: level-triggered
// in the loop's set, accepted from in batches on the loop's goroutine.
type loopAcceptor struct {
	p     *TCPProxy
	fd    int
	orig  syscall.RawConn // the listener's: accepting inside its Control
	loop  *loop
	entry *loopConn // its byFD entry
	wake  chan struct{}

	accepts atomic.Int64 // connections accepted, for the idle check

	mu      sync.Mutex // one batch at a time; stop waits for it
	on      bool
	stopped bool
	err     error // what ended accepting (not a temporary error)
}

// acceptBatch bounds the connections one event accepts (HAProxy's
// maxaccept): the loop's other connections wait meanwhile. The socket is
// level-triggered, so those left raise the next event.
const acceptBatch = 16

// start registers the socket in a loop.
func (a *loopAcceptor) start() error {
	a.loop = nextLoop()
	a.entry = &loopConn{fd: [2]int32{int32(a.fd), -1}, p: a.p, acc: a, loop: a.loop}
	byFD[a.fd].Store(a.entry)
	err := errors.New("listener closed")
	a.orig.Control(func(uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(a.fd)}
		err = unix.EpollCtl(a.loop.epfd, unix.EPOLL_CTL_ADD, a.fd, &ev)
	})
	if err != nil {
		byFD[a.fd].CompareAndSwap(a.entry, nil)
	}
	return err
}

// stop takes the socket out of its loop, after any batch in progress:
// no connection is accepted once it returns. Idempotent.
func (a *loopAcceptor) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.on = false
	if a.stopped {
		return
	}
	a.stopped = true
	// Only while the number is still this socket's entry: after its
	// owner closed it, the number may be another socket's already.
	if byFD[a.fd].CompareAndSwap(a.entry, nil) {
		// A closed listener left the set with its close.
		a.orig.Control(func(uintptr) { unix.EpollCtl(a.loop.epfd, unix.EPOLL_CTL_DEL, a.fd, nil) })
	}
}

func (a *loopAcceptor) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// accept accepts a batch (on the loop's goroutine, or a retry's timer).
func (a *loopAcceptor) accept() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.on {
		return
	}
	if a.orig.Control(func(uintptr) { a.acceptBatch() }) != nil {
		a.on = false // closed by its owner: serveLoops sees it
		a.signal()
	}
}

// acceptBatch accepts up to acceptBatch connections; a.mu is held and
// the listener's descriptor open.
func (a *loopAcceptor) acceptBatch() {
	p := a.p
	for range acceptBatch {
		nfd, sa, err := unix.Accept4(a.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch {
		case err == nil:
			a.accepts.Add(1)
			p.acceptedFD(nfd, sa)
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR || err == unix.ECONNABORTED:
		case isTemporaryAcceptError(err):
			// fd exhaustion: the connections wait in the backlog; out of
			// the set for a moment, or the level-triggered socket would
			// spin its loop.
			if ok, held := acceptErrors.Allow(); ok {
				p.event(p.log().Warn()).Err(err).Int64("suppressed", held).Msg("accept failed, retrying")
			}
			p.Stats.acceptFailed()
			ev := unix.EpollEvent{Fd: int32(a.fd)}
			unix.EpollCtl(a.loop.epfd, unix.EPOLL_CTL_MOD, a.fd, &ev)
			time.AfterFunc(50*time.Millisecond, a.rearm)
			return
		default:
			a.err = os.NewSyscallError("accept4", err)
			a.on = false
			unix.EpollCtl(a.loop.epfd, unix.EPOLL_CTL_MOD, a.fd, &unix.EpollEvent{Fd: int32(a.fd)})
			a.signal()
			return
		}
	}
}

// signal wakes the goroutine serving on the loops.
func (a *loopAcceptor) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// rearm puts the socket back after an accept that found no fd.
func (a *loopAcceptor) rearm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.on {
		a.orig.Control(func(uintptr) {
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(a.fd)}
			unix.EpollCtl(a.loop.epfd, unix.EPOLL_CTL_MOD, a.fd, &ev)
		})
	}
}

// setAcceptDeadline wakes the goroutine serving on the loops (Pause
// and Close set a past deadline to stop a serving goroutine).
func (p *TCPProxy) setAcceptDeadline(t time.Time) {
	if p == nil || t.IsZero() {
		return
	}
	if a := p.acceptor.Load(); a != nil {
		a.signal()
	}
}

// stopLoopAccept stops the loops accepting from the listener before it
// is closed, while its descriptor is still its own.
func (p *TCPProxy) stopLoopAccept() {
	if p == nil {
		return
	}
	if a := p.acceptor.Load(); a != nil {
		a.stop()
	}
}

// acceptedFD admits an accepted socket and dials its endpoint. On the
// accepting goroutine: the connect does not block (one still in progress
// is finished by a loop), and a Pick asks the Balancer only while a new
// endpoint set is being published.
func (p *TCPProxy) acceptedFD(cfd int, sa unix.Sockaddr) {
	if !p.Limits.AcquireConn(p.Stats) {
		if ok, held := connLimitHits.Allow(); ok {
			p.event(p.log().Warn()).Int64("suppressed", held).Msg("connection limit reached: new connections are reset")
		}
		resetFD(cfd)
		return
	}
	if p.OnFirstAccept != nil {
		p.OnFirstAccept()
		p.OnFirstAccept = nil
	}
	p.Conns.DialStart()
	clientIP := sockaddrIP(sa)
	if q, ok := p.Picker.(PickerNow); ok && !q.CanPickNow() {
		// The Picker must ask (an actor, which may be restarting): not
		// on the accepting goroutine, which a Pause waits for.
		workers.Go(task{fn: func() { p.dialForLoopRecovering(cfd, clientIP) }})
		return
	}
	p.dialForLoop(cfd, clientIP)
}

// dialForLoopRecovering is dialForLoop on a worker: a panic costs this
// connection only.
func (p *TCPProxy) dialForLoopRecovering(cfd int, clientIP string) {
	settled := false
	defer func() {
		if r := recover(); r != nil && !settled {
			p.event(p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
			p.Conns.DialDone()
			p.Limits.ReleaseConn(p.Stats)
			resetFD(cfd)
		}
	}()
	p.dialForLoop(cfd, clientIP)
	settled = true
}

// dialForLoop picks endpoints until one connects or is connecting, as
// dial does for refusals; a connect in progress finishes on a loop.
func (p *TCPProxy) dialForLoop(cfd int, clientIP string) {
	var exclude []string
	var lastErr error
	for {
		pick, err := p.Picker.Pick(clientIP, exclude, p.External)
		if err == nil && slices.Contains(exclude, pick.Endpoint) {
			err = ErrNoEndpoints // a Picker that ignores exclusions: do not spin
		}
		if err != nil {
			if lastErr != nil {
				err = fmt.Errorf("%w (last dial error: %v)", err, lastErr)
			}
			p.event(p.log().Debug()).Err(err).Str("client", clientIP).Msg("no endpoint reachable, resetting connection")
			p.Conns.DialDone()
			p.Limits.ReleaseConn(p.Stats)
			resetFD(cfd)
			return
		}
		ap, perr := netip.ParseAddrPort(pick.Endpoint)
		if perr != nil || ap.Addr().Zone() != "" {
			// Not a plain address: Go's dialer knows what to do with it.
			p.handBack(cfd, dialSeed{exclude: exclude, refused: len(exclude), lastErr: lastErr})
			return
		}
		bfd, connected, err := p.connectRaw(ap)
		if err == nil {
			c := &loopConn{fd: [2]int32{int32(cfd), int32(bfd)}, p: p, clientIP: clientIP, endpoint: pick.Endpoint,
				report: pick.Report, seed: exclude}
			if connected {
				if pick.Report {
					p.Picker.Dialed(pick.Endpoint, nil)
				}
				c.established()
			} else {
				c.startConnecting()
			}
			return
		}
		if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
			// The node's trouble, not the endpoint's.
			p.event(p.log().Warn()).Err(err).Str("client", clientIP).Msg("cannot open a socket to the endpoint, resetting connection")
			p.Conns.DialDone()
			p.Limits.ReleaseConn(p.Stats)
			resetFD(cfd)
			return
		}
		p.Picker.Dialed(pick.Endpoint, err)
		p.Stats.dialFailed()
		lastErr = err
		p.event(p.log().Debug()).Err(err).Str("endpoint", pick.Endpoint).Msg("dial endpoint failed, trying next")
		exclude = append(slices.Clip(exclude), pick.Endpoint)
	}
}

// connectInLoop (tests) leaves every connect to the loops, as for an
// endpoint on another node.
var connectInLoop atomic.Bool

// connectRaw opens a nonblocking socket to ap and connects it. A local
// endpoint (loopback, a veth) answers within the first connect, which
// still says EINPROGRESS; a second one says it is done (or refused).
func (p *TCPProxy) connectRaw(ap netip.AddrPort) (fd int, connected bool, err error) {
	var sa unix.Sockaddr
	family := unix.AF_INET6
	if a := ap.Addr(); a.Is4() || a.Is4In6() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.Unmap().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, os.NewSyscallError("socket", err)
	}
	// As Go's TCPConn: small writes go at once.
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if p.KeepAlive > 0 && p.lazyKeepAlive() == 0 {
		setKeepAliveFD(fd, p.KeepAlive)
	}
	err = unix.Connect(fd, sa)
	if err == unix.EINPROGRESS && connectInLoop.Load() {
		return fd, false, nil
	}
	if err == unix.EINPROGRESS {
		err = unix.Connect(fd, sa)
		switch err {
		case nil, unix.EISCONN:
			return fd, true, nil
		case unix.EALREADY, unix.EINPROGRESS:
			return fd, false, nil
		}
	}
	if err == nil {
		return fd, true, nil
	}
	unix.Close(fd)
	return -1, false, os.NewSyscallError("connect", err)
}

// established tracks c and hands it to a loop (its connect is done).
func (c *loopConn) established() {
	p := c.p
	c.tracked = p.Conns.Track(c)
	c.pair = p.Reaper.trackLoop(c, p.lazyKeepAlive())
	p.Conns.DialDone()
	// Held while registering: the loop may see the first socket's event
	// before the second is registered, and waits for this (event).
	c.mu.Lock()
	err := nextLoop().add(c)
	if err == nil {
		c.registered.Store(true)
		c.mu.Unlock()
		return
	}
	c.done, c.closed = true, true
	c.mu.Unlock()
	p.event(p.log().Warn()).Err(err).Msg("event loop refused a connection, resetting it")
	resetFD(int(c.fd[0]))
	unix.Close(int(c.fd[1]))
	c.release()
}

// startConnecting hands c to a loop to finish its connect within the
// first step of the dial ladder; a loop sees the outcome as the
// endpoint's socket becoming writable or failing.
func (c *loopConn) startConnecting() {
	p := c.p
	c.tracked = p.Conns.Track(c)
	c.connecting.Store(true)
	c.mu.Lock()
	err := nextLoop().add(c)
	if err == nil {
		c.timer = time.AfterFunc(dialTimeouts[0], c.connectTimedOut)
		c.registered.Store(true)
		c.mu.Unlock()
		return
	}
	c.done, c.closed = true, true
	c.mu.Unlock()
	p.event(p.log().Warn()).Err(err).Msg("event loop refused a connection, resetting it")
	resetFD(int(c.fd[0]))
	unix.Close(int(c.fd[1]))
	p.Conns.DialDone()
	c.release()
}

// connectEvent is an event of c while its connect is in progress (on
// its loop's goroutine).
func (c *loopConn) connectEvent(ev unix.EpollEvent) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return // handed back or closed meanwhile
	}
	if ev.Fd == c.fd[0] {
		if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.dir[0].fin = true
		}
		c.mu.Unlock()
		return // the client's bytes wait until the endpoint is there
	}
	soErr, err := unix.GetsockoptInt(int(c.fd[1]), unix.SOL_SOCKET, unix.SO_ERROR)
	if err == nil && soErr != 0 {
		err = os.NewSyscallError("connect", syscall.Errno(soErr))
	}
	if err == nil && ev.Events&unix.EPOLLOUT == 0 {
		c.mu.Unlock()
		return
	}
	if err == nil && ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		err = os.NewSyscallError("connect", unix.ECONNREFUSED)
	}
	if err != nil {
		c.closed, c.handedBack = true, true
		c.mu.Unlock()
		c.timer.Stop()
		c.handBackFailed(dialSeed{exclude: append(c.seed, c.endpoint), refused: len(c.seed) + 1, lastErr: err})
		return
	}
	c.timer.Stop()
	c.connecting.Store(false)
	c.mu.Unlock()
	p := c.p
	if c.report {
		p.Picker.Dialed(c.endpoint, nil)
	}
	c.pair = p.Reaper.trackLoop(c, p.lazyKeepAlive())
	p.Conns.DialDone()
	c.loop.pump(c, 0)
	c.loop.pump(c, 1)
}

// connectTimedOut hands a connect that took its first ladder step back
// to the goroutine data path, which goes on with the ladder.
func (c *loopConn) connectTimedOut() {
	c.mu.Lock()
	if c.closed || !c.connecting.Load() {
		c.mu.Unlock()
		return
	}
	c.closed, c.handedBack = true, true
	c.mu.Unlock()
	err := fmt.Errorf("dial tcp %s: %w", c.endpoint, os.ErrDeadlineExceeded)
	c.handBackFailed(dialSeed{exclude: append(c.seed, c.endpoint), refused: len(c.seed), rung: 1, lastErr: err})
}

// handBackFailed takes c's sockets out of its loop (c.handedBack is
// set, so no goroutine touches them any more), closes the endpoint's, reports
// its failure and hands the client to the goroutine data path, which
// dials on from seed.
func (c *loopConn) handBackFailed(seed dialSeed) {
	p := c.p
	for _, fd := range c.fd {
		byFD[fd].Store(nil)
		unix.EpollCtl(c.loop.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	}
	unix.Close(int(c.fd[1]))
	p.Picker.Dialed(c.endpoint, seed.lastErr)
	p.Stats.dialFailed()
	p.event(p.log().Debug()).Err(seed.lastErr).Str("endpoint", c.endpoint).Msg("dial endpoint failed, trying next")
	c.tracked.Release()
	if c.dir[0].fin && clientGoneFD(int(c.fd[0])) {
		p.Conns.DialDone()
		p.Limits.ReleaseConn(p.Stats)
		resetFD(int(c.fd[0]))
		return
	}
	p.handBack(int(c.fd[0]), seed)
}

// handBack gives an accepted socket, counted as dialing, to the
// goroutine data path, which dials on from seed.
func (p *TCPProxy) handBack(cfd int, seed dialSeed) {
	f := os.NewFile(uintptr(cfd), "")
	nc, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	if err != nil {
		p.event(p.log().Warn()).Err(err).Msg("cannot hand a connection to the goroutine data path, resetting it")
		p.Conns.DialDone()
		p.Limits.ReleaseConn(p.Stats)
		return
	}
	workers.Go(task{p: p, conn: nc.(*net.TCPConn), seed: seed})
}

// sockaddrIP is the address of an accepted peer, as the goroutine data
// path gives it to the Picker.
func sockaddrIP(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr).String()
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap().String()
	}
	return ""
}

// resetFD closes with SO_LINGER 0 so the peer gets an RST at once.
func resetFD(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
	unix.Close(fd)
}

// clientGoneFD is clientGone for a raw socket.
func clientGoneFD(fd int) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n == 0 && err == nil || err != nil && err != unix.EAGAIN && err != unix.EINTR
}

// setKeepAliveFD turns on keepalive probes after idle, as setKeepAlive.
func setKeepAliveFD(fd int, idle time.Duration) {
	interval, count := keepAliveProbes(idle)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(max(idle/time.Second, 1)))
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(max(interval/time.Second, 1)))
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, count)
}
