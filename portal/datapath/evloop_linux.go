package datapath

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The event loops: established TCP connections without a goroutine.
//
// A connection of the goroutine data path has two goroutines, and every
// chunk it moves wakes one of them through Go's poller. Here a
// connection's two sockets are raw descriptors (accept4 and connect of
// kproxy's own, never in Go's poller) registered edge-triggered in the
// process's one epoll set. GOMAXPROCS loops take turns at it: a loop's
// goroutine takes a batch of the set's events without blocking, moves
// every ready connection's bytes, and looks again; with nothing to take
// it waits on Go's poller for the set to be readable (an epoll set is
// itself pollable), so an idle loop holds no thread. RawConn.Read lets
// one loop at a time look, so while one loop works through its batch
// the next takes what comes meanwhile: a loop whose thread the kernel
// preempts holds only the events it had taken, not every connection it
// ever served. A panic while handling an event is recovered and closes
// that event's connection only.
//
// A connection is handled by one loop at a time (dispatch); what other
// goroutines do to it (Close from a drain or the idle reaper, a connect
// timeout) goes through its mutex and system calls a loop then sees as
// events.

// epollSet is the set every loop waits on.
type epollSet struct {
	fd   int
	rc   syscall.RawConn
	file *os.File // keeps fd open and in Go's poller
}

type loop struct {
	buf    []byte // small chunks are read here, then written at once
	events []unix.EpollEvent
}

// loopEvents is how many events a loop takes per epoll_wait: few enough
// that a batch delays the last of its connections by little.
const loopEvents = 32

var (
	loopsOnce sync.Once
	loopSet   epollSet
	loopsErr  error
	// byFD is what each registered descriptor belongs to. Sized by the
	// open-file limit (fds above it go the goroutine way); untouched
	// pages of it cost no memory.
	byFD []atomic.Pointer[loopEntry]
)

// loopEntry is what a descriptor in the loops' set belongs to: one of a
// connection's two sockets, or a listening socket the loops accept on.
// Each is its owner's own (loopConn.entry, loopAcceptor.entry), so
// registering costs no allocation.
//
// A registration's event data is the descriptor and the entry's
// generation: a socket whose copy another process holds (the socket
// keeper's) stays in the set after our close, and a batch taken before a
// close still holds its events, so an event may name a descriptor whose
// number is another socket's by now. Its generation tells it apart.
type loopEntry struct {
	conn *loopConn
	acc  *loopAcceptor
	gen  uint32 // set before the entry is published in byFD, then fixed
}

// loopGens numbers registrations (0 is none's).
var loopGens atomic.Uint32

// newGen gives e the next generation, once, before it is published (an
// acceptor registered again keeps its socket and its generation).
func (e *loopEntry) newGen() {
	for e.gen == 0 {
		e.gen = loopGens.Add(1)
	}
}

// event is the registration of fd for events under e's generation.
func (e *loopEntry) event(events uint32, fd int32) *unix.EpollEvent {
	return &unix.EpollEvent{Events: events, Fd: fd, Pad: int32(e.gen)}
}

// lookup is the entry an event of the set belongs to: nil when its
// descriptor's number has been another socket's since.
func lookup(ev *unix.EpollEvent) *loopEntry {
	e := byFD[ev.Fd].Load()
	if e == nil || e.gen != uint32(ev.Pad) {
		return nil
	}
	return e
}

// maxLoopFDs bounds byFD (8 MiB of address space at most).
const maxLoopFDs = 1 << 20

func startLoops() {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		loopsErr = fmt.Errorf("event loops: %w", err)
		return
	}
	byFD = make([]atomic.Pointer[loopEntry], min(rl.Max, maxLoopFDs))
	if loopSet, loopsErr = newEpollSet(); loopsErr != nil {
		return
	}
	for range runtime.GOMAXPROCS(0) {
		l := &loop{buf: make([]byte, smallCopySize), events: make([]unix.EpollEvent, loopEvents)}
		go l.run()
	}
}

func newEpollSet() (epollSet, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return epollSet{}, fmt.Errorf("event loops: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return epollSet{}, fmt.Errorf("event loops: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kproxy-event-loops")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return epollSet{}, fmt.Errorf("event loops: %w", err)
	}
	return epollSet{fd: fd, rc: rc, file: f}, nil
}

// theLoops starts the loops on first use.
func theLoops() error {
	loopsOnce.Do(startLoops)
	return loopsErr
}

// run is a loop's goroutine. It looks at the set inside RawConn.Read's
// callback, after Read has cleared the poller's readiness note and
// before it parks: an event that comes after the look wakes it, one
// before is in the look. (Parking without looking first would miss an
// event noted while the last batch ran, and Read clears it.) Read holds
// the set's read lock, so the loops look one at a time.
func (l *loop) run() {
	var n int
	poll := func(uintptr) bool { // made once: a closure per wait costs an allocation per batch
		n, _ = unix.EpollWait(loopSet.fd, l.events, 0)
		return n > 0
	}
	for {
		if err := loopSet.rc.Read(poll); err != nil {
			time.Sleep(time.Second) // the set is never closed; must not spin if it were
			continue
		}
		for i := range l.events[:n] {
			ev := l.events[i]
			e := lookup(&ev)
			switch {
			case e == nil:
			case e.acc != nil: // its accepting is serialised by its own mutex
				e.acc.acceptRecovering()
			default:
				l.dispatch(e.conn, ev)
			}
		}
		// A loop with events goes on without parking, so it never gives
		// its P to a goroutine made runnable meanwhile: another loop, woken
		// by Go's poller while no P was idle, would wait for a thread of
		// its own to be woken and scheduled by the kernel (milliseconds on
		// a busy node). Yielding after each batch lets it run here.
		runtime.Gosched()
	}
}

// dispatch hands one of c's events to the loop handling c, which may be
// this one: the event is noted on c, and whichever loop holds c's busy
// mutex handles what is noted before letting go. A loop never waits for
// another's connection, so one held up (its thread preempted) holds up
// only its own connection's events.
func (l *loop) dispatch(c *loopConn, ev unix.EpollEvent) {
	side := 0
	if ev.Fd == c.fd[1] {
		side = 1
	}
	c.noted[side].Or(ev.Events)
	for c.busy.TryLock() {
		for {
			e0, e1 := c.noted[0].Swap(0), c.noted[1].Swap(0)
			if e0 == 0 && e1 == 0 || c.gone() {
				break // a finished connection's fds may be another's already
			}
			if e0 != 0 {
				l.event(c, unix.EpollEvent{Events: e0, Fd: c.fd[0]})
			}
			if e1 != 0 && !c.gone() {
				l.event(c, unix.EpollEvent{Events: e1, Fd: c.fd[1]})
			}
		}
		c.busy.Unlock()
		// Noted after the last look but before the unlock, by a loop
		// whose TryLock failed: look again.
		if c.noted[0].Load() == 0 && c.noted[1].Load() == 0 {
			return
		}
	}
}

// addConn registers c's two sockets in the loops' set. A socket ready
// already raises its event at once.
func addConn(c *loopConn) error {
	for _, fd := range c.fd {
		if int(fd) >= len(byFD) {
			return fmt.Errorf("fd %d above the event loops' table (%d)", fd, len(byFD))
		}
	}
	c.entry.conn = c
	c.entry.newGen()
	for _, fd := range c.fd {
		byFD[fd].Store(&c.entry)
	}
	for i, fd := range c.fd {
		ev := c.entry.event(unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, fd)
		if err := unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_ADD, int(fd), ev); err != nil {
			for _, f := range c.fd[:i] {
				unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_DEL, int(f), nil)
			}
			for _, f := range c.fd {
				byFD[f].Store(nil)
			}
			return err
		}
	}
	return nil
}

// event handles one readiness report of one of c's sockets.
func (l *loop) event(c *loopConn, ev unix.EpollEvent) {
	defer func() {
		if r := recover(); r != nil {
			c.p.event(c.p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
			c.finish()
		}
	}()
	if c.phase.Load() == phaseRegistering {
		c.mu.Lock() // held while the registration goes on
		gone := c.gone()
		c.mu.Unlock()
		if gone {
			return // the registration failed
		}
	}
	if f := loopFault.Load(); f != nil {
		(*f)(c)
	}
	if c.phase.Load() == phaseConnecting {
		c.connectEvent(l, ev)
		return
	}
	side := 0
	if ev.Fd == c.fd[1] {
		side = 1
	}
	if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.dir[side].fin = true
	}
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.pump(c, side)
	}
	if !c.gone() && ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 && c.dir[1-side].held() {
		l.pump(c, 1-side)
	}
}
