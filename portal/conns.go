package portal

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
	mu    sync.Mutex
	conns map[io.Closer]struct{}
	// released wakes Drain when something is unregistered.
	released chan struct{}
	// dialing counts accepted connections still choosing and dialing an
	// endpoint: they need the actors, which a shutdown stops after them.
	dialing atomic.Int64
}

// NewConnTracker returns an empty tracker.
func NewConnTracker() *ConnTracker {
	return &ConnTracker{conns: map[io.Closer]struct{}{}, released: make(chan struct{}, 1)}
}

// Add registers c and returns a func that unregisters it.
func (t *ConnTracker) Add(c io.Closer) (release func()) {
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
		select {
		case t.released <- struct{}{}:
		default:
		}
	}
}

// Dialing marks an accepted connection choosing and dialing its endpoint;
// call the returned func once it has one (or failed).
func (t *ConnTracker) Dialing() (done func()) {
	if t == nil {
		return func() {}
	}
	t.dialing.Add(1)
	return func() {
		t.dialing.Add(-1)
		select {
		case t.released <- struct{}{}:
		default:
		}
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
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// CloseAll closes everything tracked (shutdown).
func (t *ConnTracker) CloseAll() {
	t.mu.Lock()
	cs := make([]io.Closer, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}
