package datapath

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EventLoopsSupported: Linux has the event loops.
const EventLoopsSupported = true

// usesLoops reports whether p's connections go to the event loops: those
// that need nothing but bytes moved, from the node's address or the
// client's. Tracing, the PROXY header and injected faults stay with the
// goroutine data path.
func (p *TCPProxy) usesLoops() bool {
	return (p.EventLoops || loopsEverywhere) && p.Tracer == nil && p.ProxyProtocol == 0 && p.Faults == nil
}

// serveLoops is Serve for the event loops: a loop accepts (accept4, so
// no socket is ever in Go's poller), dials with a nonblocking connect and
// hands each pair to the loops; this goroutine only waits for Pause, for
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
	a.batch = func(uintptr) { a.acceptBatch() }
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

// loopAcceptor is a listening socket served by the loops: level-triggered
// in their set, accepted from in batches on a loop's goroutine.
type loopAcceptor struct {
	p     *TCPProxy
	fd    int
	orig  syscall.RawConn // the listener's: accepting inside its Control
	entry loopEntry       // its byFD entry
	wake  chan struct{}
	batch func(uintptr) // acceptBatch for Control, made once

	accepts atomic.Int64 // connections accepted, for the idle check

	mu      sync.Mutex // one batch at a time; stop waits for it
	on      bool
	stopped bool
	err     error // what ended accepting (not a temporary error)
}

// acceptBatch bounds the connections one event accepts (HAProxy's
// maxaccept): the loop's other events wait meanwhile. The socket is
// level-triggered, so those left raise the next event.
const acceptBatch = 16

// start registers the socket in the loops' set.
func (a *loopAcceptor) start() error {
	a.entry.acc = a
	a.entry.newGen()
	byFD[a.fd].Store(&a.entry)
	err := errors.New("listener closed")
	a.orig.Control(func(uintptr) {
		setNoDelay(a.fd) // a listener not opened by Open (tests, embedders)
		err = unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_ADD, a.fd, a.entry.event(unix.EPOLLIN, int32(a.fd)))
	})
	if err != nil {
		byFD[a.fd].CompareAndSwap(&a.entry, nil)
	}
	return err
}

// stop takes the socket out of the loops' set, after any batch in progress:
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
	if byFD[a.fd].CompareAndSwap(&a.entry, nil) {
		// A closed listener left the set with its close.
		a.orig.Control(func(uintptr) { unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_DEL, a.fd, nil) })
	}
}

func (a *loopAcceptor) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// acceptRecovering is accept, with a panic confined to the batch: the
// listening socket stays, and its next event starts another.
func (a *loopAcceptor) acceptRecovering() {
	defer func() {
		if r := recover(); r != nil {
			a.p.event(a.p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
		}
	}()
	a.accept()
}

// accept accepts a batch (on a loop's goroutine). While another loop
// is accepting from the socket this one goes on: the socket, level-
// triggered, is reported again while connections wait.
func (a *loopAcceptor) accept() {
	if !a.mu.TryLock() {
		return
	}
	defer a.mu.Unlock()
	if !a.on {
		return
	}
	if a.orig.Control(a.batch) != nil {
		a.on = false // closed by its owner: serveLoops sees it
		a.signal()
	}
}

// acceptBatch accepts up to acceptBatch connections; a.mu is held and
// the listener's descriptor open.
func (a *loopAcceptor) acceptBatch() {
	p := a.p
	for range acceptBatch {
		nfd, peer, err := acceptPeer(a.fd)
		switch {
		case err == nil:
			a.accepts.Add(1)
			p.acceptedFD(nfd, peer)
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR || err == unix.ECONNABORTED:
		case isTemporaryAcceptError(err):
			// fd exhaustion: the connections wait in the backlog; out of
			// the set for a moment, or the level-triggered socket would
			// spin the loops.
			if ok, held := acceptErrors.Allow(); ok {
				p.event(p.log().Warn()).Err(err).Int64("suppressed", held).Msg("accept failed, retrying")
			}
			p.Stats.acceptFailed()
			unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_MOD, a.fd, a.entry.event(0, int32(a.fd)))
			time.AfterFunc(50*time.Millisecond, a.rearm)
			return
		default:
			a.err = os.NewSyscallError("accept4", err)
			a.on = false
			unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_MOD, a.fd, a.entry.event(0, int32(a.fd)))
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
			unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_MOD, a.fd, a.entry.event(unix.EPOLLIN, int32(a.fd)))
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
func (p *TCPProxy) acceptedFD(cfd int, peer netip.Addr) {
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
	kept := p.keepConn("", cfd)
	if q, ok := p.Picker.(PickerNow); ok && !q.CanPickNow() {
		// The Picker must ask (an actor, which may be restarting): not
		// on the accepting goroutine, which a Pause waits for.
		workers.Go(task{fn: func() { p.dialForLoopRecovering(cfd, peer, kept) }})
		return
	}
	p.dialForLoop(cfd, peer, kept)
}
