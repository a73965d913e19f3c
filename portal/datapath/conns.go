package datapath

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
)

// ConnTracker counts and can close the connections and flows the data path
// owns. Connections outlive the listener that accepted them (a Portal
// restart or a service update does not cut them); the tracker lets shutdown
// end them and lets tests see that nothing leaks.
type ConnTracker struct {
	// shards spread registrations over several locks, so connections on
	// different cores do not queue on one process-wide mutex.
	shards [connShards]connShard
	next   atomic.Uint32 // picks the shard of the next registration
	// released wakes Drain when something is unregistered.
	released chan struct{}
	// dialing counts accepted connections still choosing and dialing an
	// endpoint: they need the actors, which a shutdown stops after them.
	dialing atomic.Int64
}

const connShards = 16

type connShard struct {
	mu    sync.Mutex
	conns map[io.Closer]struct{}
	_     [40]byte // keep shards on separate cache lines
}

// NewConnTracker returns an empty tracker.
func NewConnTracker() *ConnTracker {
	t := &ConnTracker{released: make(chan struct{}, 1)}
	for i := range t.shards {
		t.shards[i].conns = map[io.Closer]struct{}{}
	}
	return t
}

// Tracked is a registration made by Track; Release ends it.
type Tracked struct {
	t *ConnTracker
	s *connShard
	c io.Closer
}

// Track registers c; the result's Release unregisters it. Unlike Add it
// allocates nothing.
func (t *ConnTracker) Track(c io.Closer) Tracked {
	if t == nil {
		return Tracked{}
	}
	s := &t.shards[t.next.Add(1)%connShards]
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return Tracked{t, s, c}
}

// Release unregisters what Track registered.
func (r Tracked) Release() {
	if r.t == nil {
		return
	}
	r.s.mu.Lock()
	delete(r.s.conns, r.c)
	r.s.mu.Unlock()
	r.t.wake()
}

func (t *ConnTracker) wake() {
	select {
	case t.released <- struct{}{}:
	default:
	}
}

// Add registers c and returns a func that unregisters it.
func (t *ConnTracker) Add(c io.Closer) (release func()) {
	if t == nil {
		return func() {}
	}
	return t.Track(c).Release
}

// Dialing marks an accepted connection choosing and dialing its endpoint;
// call the returned func once it has one (or failed).
func (t *ConnTracker) Dialing() (done func()) {
	if t == nil {
		return func() {}
	}
	t.DialStart()
	return t.DialDone
}

// DialStart and DialDone are Dialing without the func.
func (t *ConnTracker) DialStart() {
	if t != nil {
		t.dialing.Add(1)
	}
}

// DialDone ends what DialStart began.
func (t *ConnTracker) DialDone() {
	if t != nil {
		t.dialing.Add(-1)
		t.wake()
	}
}

// WaitDialed waits until no accepted connection is still dialing, or ctx
// is done.
func (t *ConnTracker) WaitDialed(ctx context.Context) {
	for t.dialing.Load() > 0 {
		select {
		case <-t.released:
		case <-ctx.Done():
			return
		}
	}
}

// Drain waits until nothing is tracked any more (the connections ended
// by themselves) or ctx is done, and returns how many are left.
func (t *ConnTracker) Drain(ctx context.Context) int {
	for {
		n := t.Len()
		if n == 0 {
			return 0
		}
		select {
		case <-t.released:
		case <-ctx.Done():
			return t.Len()
		}
	}
}

// Len is the number of open connections and flows.
func (t *ConnTracker) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.conns)
		s.mu.Unlock()
	}
	return n
}

// CloseAll closes everything tracked (shutdown).
func (t *ConnTracker) CloseAll() {
	var cs []io.Closer
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for c := range s.conns {
			cs = append(cs, c)
		}
		s.mu.Unlock()
	}
	for _, c := range cs {
		c.Close()
	}
}
