package portal

import (
	"io"
	"sync"
)

// ConnTracker counts and can close the connections and flows the data path
// owns. Connections outlive the listener that accepted them (a Portal
// restart or a service update does not cut them); the tracker lets shutdown
// end them and lets tests see that nothing leaks.
type ConnTracker struct {
	mu    sync.Mutex
	conns map[io.Closer]struct{}
}

// NewConnTracker returns an empty tracker.
func NewConnTracker() *ConnTracker {
	return &ConnTracker{conns: map[io.Closer]struct{}{}}
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
