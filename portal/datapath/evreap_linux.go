package datapath

import (
	"time"

	"golang.org/x/sys/unix"
)

// trackLoop is Track for an event loop's connection; nil when the
// reaper does not sweep.
func (r *IdleReaper) trackLoop(c *loopConn, keepAlive time.Duration) *pair {
	if !r.Sweeping() {
		return nil
	}
	p := &pair{lc: c, keepAlive: keepAlive}
	r.add(p)
	return p
}

// sweepLoopConn is the sweep of one event-loop connection: under its
// mutex, so its descriptors are still its own.
func (r *IdleReaper) sweepLoopConn(p *pair) {
	c := p.lc
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone() {
		return
	}
	if p.keepAlive > 0 {
		setKeepAliveFD(int(c.fd[1]), p.keepAlive)
		p.keepAlive = 0
	}
	timeout := r.timeout(p)
	if timeout <= 0 {
		return
	}
	idleC, okC := sinceLastReceiveFD(int(c.fd[0]))
	idleB, okB := sinceLastReceiveFD(int(c.fd[1]))
	if okC && okB && min(idleC, idleB) >= timeout {
		r.Reaped.Add(1)
		for _, fd := range c.fd {
			unix.Shutdown(int(fd), unix.SHUT_RDWR) // the loop, woken, closes them
		}
	}
}
