package datapath

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Default TCP timeouts, beside what users know: Envoy's TCP proxy closes
// a connection idle for 1 h; HAProxy's "timeout client-fin" bounds a
// half-closed one (commonly a minute); Linux probes a silent peer only
// after 2 h, so kproxy's keepalive starts after 5 min.
const (
	DefaultTCPIdleTimeout      = time.Hour
	DefaultTCPHalfCloseTimeout = time.Minute
	DefaultTCPKeepAlive        = 5 * time.Minute
)

// IdleReaper closes proxied TCP connections that moved no byte either way
// for IdleTimeout, or HalfCloseTimeout once one direction has ended. It
// asks the kernel when each socket last received data (TCP_INFO), so the
// copy itself stays a splice with no per-read bookkeeping. Where the
// kernel cannot tell (not Linux), nothing is reaped.
type IdleReaper struct {
	IdleTimeout      time.Duration
	HalfCloseTimeout time.Duration

	mu    sync.Mutex
	pairs map[*pair]struct{}
	once  sync.Once
	stop  chan struct{}
	// Reaped counts connections closed as idle.
	Reaped atomic.Int64
}

type pair struct {
	client, backend *net.TCPConn
	lc              *loopConn // an event loop's connection, instead of client and backend
	halfClosed      atomic.Bool
	// keepAlive, when set, is the backend's keepalive to turn on at the
	// next sweep (only the sweeping goroutine reads and clears it).
	keepAlive time.Duration
	// The client-to-backend copy's goroutine and results (splicePair).
	proxy       *TCPProxy // logs a panic of the copy; nil logs none
	wg          sync.WaitGroup
	toBackend   int64
	clientFirst bool
	// kp are the connection's own pipes, client to backend first, when
	// the socket keeper holds it (adopt.go); else nil.
	kp [2]*splicePipe
}

// Sweeping reports whether the reaper tracks connections at all.
func (r *IdleReaper) Sweeping() bool {
	return r != nil && (r.IdleTimeout > 0 || r.HalfCloseTimeout > 0)
}

// Track registers a proxied connection; the returned pair's halfClosed is
// set by the copy, and the pair must be passed to Untrack when it ends.
// keepAlive, when positive, turns on the backend socket's keepalive
// (after that long idle) at the next sweep, at most 10 s later: probes
// start after minutes of silence, so a connection that ends within
// seconds, as most do, never pays the 4 system calls (Sweeping must be
// true; else the dial turns it on).
func (r *IdleReaper) Track(client, backend *net.TCPConn, keepAlive time.Duration) *pair {
	p := &pair{client: client, backend: backend, keepAlive: keepAlive}
	if r.Sweeping() {
		r.add(p)
	}
	return p
}

// add starts tracking p (Sweeping is true).
func (r *IdleReaper) add(p *pair) {
	r.once.Do(r.start)
	r.mu.Lock()
	r.pairs[p] = struct{}{}
	r.mu.Unlock()
}

// timeout is how long p may go without a byte either way, 0 for ever.
func (r *IdleReaper) timeout(p *pair) time.Duration {
	if p.halfClosed.Load() && r.HalfCloseTimeout > 0 {
		return r.HalfCloseTimeout
	}
	return r.IdleTimeout
}

// Untrack forgets a connection Track registered.
func (r *IdleReaper) Untrack(p *pair) {
	if !r.Sweeping() {
		return
	}
	r.mu.Lock()
	delete(r.pairs, p)
	r.mu.Unlock()
}

func (r *IdleReaper) start() {
	r.pairs = map[*pair]struct{}{}
	r.stop = make(chan struct{})
	go r.run()
}

// Stop ends the sweeping (connections stay open).
func (r *IdleReaper) Stop() {
	if r == nil {
		return
	}
	r.once.Do(r.start)
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}

// sweepInterval checks often enough that a connection is reaped within a
// quarter of its timeout past it, and at most every 10 s.
func (r *IdleReaper) sweepInterval() time.Duration {
	d := 10 * time.Second
	for _, t := range []time.Duration{r.IdleTimeout, r.HalfCloseTimeout} {
		if t > 0 {
			d = min(d, t/4)
		}
	}
	return max(d, 10*time.Millisecond)
}

func (r *IdleReaper) run() {
	t := time.NewTicker(r.sweepInterval())
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.sweep()
		}
	}
}

func (r *IdleReaper) sweep() {
	r.mu.Lock()
	ps := make([]*pair, 0, len(r.pairs))
	for p := range r.pairs {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		if p.lc != nil {
			r.sweepLoopConn(p)
			continue
		}
		if p.keepAlive > 0 {
			setKeepAlive(p.backend, p.keepAlive)
			p.keepAlive = 0
		}
		timeout := r.timeout(p)
		if timeout <= 0 {
			continue
		}
		idleC, okC := sinceLastReceive(p.client)
		idleB, okB := sinceLastReceive(p.backend)
		if okC && okB && min(idleC, idleB) >= timeout {
			r.Reaped.Add(1)
			p.client.Close()
			p.backend.Close()
		}
	}
}

// keepAliveProbes: after idle, probe every 30 s (or idle, if shorter) up
// to 4 times, so a vanished peer is noticed about idle + 2 min later.
func keepAliveProbes(idle time.Duration) (interval time.Duration, count int) {
	return min(idle, 30*time.Second), 4
}

// keepAliveDialer dials endpoints with keepalive after idle (none when
// idle <= 0) and the given timeout.
func keepAliveDialer(idle, timeout time.Duration) *net.Dialer {
	if idle <= 0 {
		return &net.Dialer{Timeout: timeout, KeepAlive: -1, Control: connectEarly}
	}
	interval, count := keepAliveProbes(idle)
	return &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count}, Control: connectEarly}
}

// setKeepAlive turns on keepalive after idle on an established socket.
func setKeepAlive(c *net.TCPConn, idle time.Duration) {
	interval, count := keepAliveProbes(idle)
	c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count})
}
