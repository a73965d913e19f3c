package datapath

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// loopConn is one proxied connection on an event loop: fd[0] the
// client's socket, fd[1] the endpoint's; dir[d] moves fd[d]'s bytes to
// the other.
//
// Two locks, each with its own charge: busy is held by the loop handling
// the connection's events, and what only a loop touches (dir, kp) is
// under it; mu orders the connection's phase with the goroutines that are
// not a loop (Close, the idle reaper, the connect timeout), which use the
// descriptors only under mu and only while the phase says they are still
// the connection's.
type loopConn struct {
	fd    [2]int32
	dir   [2]flow
	p     *TCPProxy
	entry loopEntry        // both sockets' byFD entry
	busy  sync.Mutex       // held by the loop handling its events
	noted [2]atomic.Uint32 // events of fd[i] not yet handled (dispatch)

	// phase is where the connection is in its life (connPhase); it only
	// moves forward, under mu, and is read without it where a recent
	// value is enough.
	phase    atomic.Uint32
	mu       sync.Mutex
	clientIP string
	endpoint string
	keptID   string // the socket keeper holds copies under this ID ("": none)
	// kp are the connection's own pipes while the keeper holds it, once
	// connected: every chunk then goes through them (adopt.go).
	kp     [2]*splicePipe
	report bool     // the Pick asked for the dial's outcome
	seed   dialSeed // the dial's ladder up to this endpoint
	timer  *time.Timer

	tracked Tracked
	pair    *pair // the idle reaper's record
}

// connPhase is a loopConn's phase. A connection goes from registering to
// connecting (its endpoint's connect in progress) or open, and from
// connecting to open or handed back; it ends finished or handed back.
type connPhase = uint32

const (
	// phaseRegistering: its sockets are being added to the loops' set; an
	// event that comes first waits on mu for the registration to end.
	phaseRegistering connPhase = iota
	// phaseConnecting: the endpoint's connect is in progress, within the
	// dial ladder's first step.
	phaseConnecting
	// phaseOpen: connected; the loops move its bytes.
	phaseOpen
	// phaseHandedBack: its connect failed or took too long, and the
	// goroutine data path has the client now.
	phaseHandedBack
	// phaseFinished: its sockets are closed (or being closed by the loop
	// that finished it) and what it held is given back.
	phaseFinished
)

// gone reports whether the connection is finished or handed back: its
// descriptors may be another socket's already.
func (c *loopConn) gone() bool { return c.phase.Load() >= phaseHandedBack }

// moveLocked moves c from phase from to next (under mu); false when c is
// not in phase from.
func (c *loopConn) moveLocked(from, next connPhase) bool {
	if c.phase.Load() != from {
		return false
	}
	c.phase.Store(next)
	return true
}

// flow is one direction's state.
type flow struct {
	pend   []byte      // read, not yet written (small chunks)
	pipe   *splicePipe // holds inPipe bytes not yet written (bulk)
	inPipe int64
	bulk   bool  // the last chunk filled the buffer: splice the next
	fin    bool  // the source reported its end (or an error): read to it
	eof    bool  // the source's end of stream was read
	shut   bool  // and the destination's write half shut after it
	n      int64 // bytes written
}

func (f *flow) held() bool { return len(f.pend) > 0 || f.inPipe > 0 }

// pump moves direction d until its source would block, its destination
// is full, or the stream ends. A read that leaves the socket empty
// (short) ends it too, unless the peer's FIN was reported: then read on
// to the end of stream, which no further edge would announce.
func (l *loop) pump(c *loopConn, d int) {
	f := &c.dir[d]
	src, dst := int(c.fd[d]), int(c.fd[1-d])
	for !c.gone() {
		if !c.flush(f, dst) {
			return
		}
		if f.eof {
			c.ended(d)
			return
		}
		if kp := c.kp[d]; kp != nil {
			if !c.spliceIn(f, src, kp) {
				return
			}
			// A short splice does not say the socket is drained (it
			// stops at the pipe's 16 slots, one per segment): splice
			// again until it says EAGAIN.
			kp.grow(f.inPipe)
			continue
		}
		if f.bulk {
			if p, err := getPipe(); err == nil {
				if !c.spliceIn(f, src, p) {
					return
				}
				continue
			}
			// No fd for a pipe: this chunk goes through memory.
		}
		m, err := readRetrying(src, l.buf)
		switch {
		case err == unix.EAGAIN:
			return
		case err != nil:
			c.finish()
			return
		case m == 0:
			f.eof = true
			continue
		}
		w, err := rawWrite(dst, l.buf[:m])
		if err != nil && err != unix.EAGAIN {
			c.finish()
			return
		}
		w = max(w, 0)
		f.n += int64(w)
		f.bulk = m == len(l.buf)
		if w < m {
			f.pend = append(f.pend[:0], l.buf[w:m]...)
			return // the destination is full: its EPOLLOUT resumes
		}
		if m < len(l.buf) && !f.fin {
			return // drained: more data, or the FIN, raises a new edge
		}
	}
}

// flush writes what direction f holds to dst; false when dst is full
// or the connection ended.
func (c *loopConn) flush(f *flow, dst int) bool {
	for len(f.pend) > 0 {
		m, err := rawWrite(dst, f.pend)
		if err == unix.EAGAIN {
			return false
		}
		if err != nil {
			c.finish()
			return false
		}
		f.n += int64(m)
		f.pend = f.pend[m:]
	}
	f.pend = f.pend[:0:0]
	for f.inPipe > 0 {
		m, err := splice64(unix.Splice(f.pipe.r, nil, dst, nil, int(f.inPipe), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return false
		case err != nil:
			c.finish()
			return false
		default:
			f.inPipe -= m
			f.n += m
		}
	}
	if f.pipe != nil {
		putPipe(f.pipe)
		f.pipe = nil
	}
	return true
}

// spliceIn moves a bulk chunk from src into pipe p; false when src had
// nothing (p given back) or the connection ended.
func (c *loopConn) spliceIn(f *flow, src int, p *splicePipe) bool {
	var n int64
	var err error
	for {
		n, err = splice64(unix.Splice(src, nil, p.w, nil, maxSpliceSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == unix.EAGAIN:
		putPipe(p)
		return false
	case err != nil:
		putPipe(p)
		c.finish()
		return false
	case n == 0:
		putPipe(p)
		f.eof = true
		return true
	}
	f.pipe, f.inPipe, f.bulk = p, n, n >= smallCopySize
	return true
}

// ended handles direction d's end of stream, everything before it
// written: the other side's write half is shut (the half-close reaches
// the peer), or, when the other direction ended too, both are closed.
func (c *loopConn) ended(d int) {
	if c.pair != nil {
		c.pair.halfClosed.Store(true)
	}
	o := &c.dir[1-d]
	if o.eof && !o.held() {
		c.finish()
		return
	}
	if f := &c.dir[d]; !f.shut {
		f.shut = true
		unix.Shutdown(int(c.fd[1-d]), unix.SHUT_WR)
	}
}

// finish closes both sockets and gives back what the connection held
// (on a loop's goroutine), unless it is handed back or finished already.
func (c *loopConn) finish() {
	c.mu.Lock()
	was := c.phase.Load()
	if was >= phaseHandedBack {
		c.mu.Unlock()
		return
	}
	c.phase.Store(phaseFinished)
	c.mu.Unlock()
	if was == phaseConnecting { // a panic while connecting: no dial to wait for
		if c.timer != nil {
			c.timer.Stop()
		}
		c.p.Conns.DialDone()
	}
	for _, fd := range c.fd {
		byFD[fd].Store(nil)
		if c.p.keepsConns {
			// The keeper's copies (held until it drops them) keep the
			// sockets, and so their registrations, past our close.
			unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_DEL, int(fd), nil)
		}
	}
	c.p.unkeep(c.keptID, int(c.fd[0]), int(c.fd[1]))
	for _, fd := range c.fd {
		unix.Close(int(fd)) // leaves the epoll set with it, unless kept
	}
	for i := range c.dir {
		if f := &c.dir[i]; f.pipe != nil {
			if !f.pipe.dedicated {
				f.pipe.close() // bytes may be left in it: never reuse
			}
			f.pipe = nil
		}
		if c.kp[i] != nil {
			c.kp[i].close()
			c.kp[i] = nil
		}
	}
	c.release()
}

// release gives back the connection's limits and trackers, as it
// finishes (once: a connection finishes once).
func (c *loopConn) release() {
	p := c.p
	p.Stats.copied(c.dir[0].n, c.dir[1].n)
	if c.pair != nil {
		p.Reaper.Untrack(c.pair)
	}
	p.Limits.ReleaseConn(p.Stats)
	c.tracked.Release() // last: a Drain that returns finds everything given back
}

// Close ends the connection from any goroutine (a drain's deadline, the
// idle reaper): both sockets are shut down, and the loop, woken by that,
// closes them.
func (c *loopConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.gone() && !c.p.leftToKeeper(c.keptID) {
		for _, fd := range c.fd {
			unix.Shutdown(int(fd), unix.SHUT_RDWR)
		}
	}
	return nil
}
