package datapath

import (
	"sync"
	"sync/atomic"
)

// The start gate: at a proxy's start its service ports open one after
// another, and a port served as soon as it listens takes the CPU the
// others need to open (on a 10,000-port start, connections to the first
// ports delayed the last by as much again). A set held (HoldServing)
// keeps its parked sockets' first wakes until StartServing: they listen,
// the kernel completes connections into their backlogs and queues
// datagrams, and serving begins once every port of the first state is
// open, as a proxy that opens all its frontends before it serves any.
// Where sockets do not park (not Linux), they serve at once.
type startGate struct {
	open atomic.Bool // set once, under mu: every later wake passes without the lock
	mu   sync.Mutex
	held []*Listener
}

// admit reports whether l may serve now; if not, l is woken when the gate
// opens.
func (g *startGate) admit(l *Listener) bool {
	if g.open.Load() {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open.Load() {
		return true
	}
	g.held = append(g.held, l)
	return false
}

// HoldServing makes the set's sockets, opened from now on, wait to serve
// until StartServing.
func (s *Listeners) HoldServing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = &startGate{}
	}
}

// StartServing lets the set's held sockets serve, and those parked later
// serve at once; calls after the first do nothing. The keeper's sockets
// that no port of the first state took are dropped.
func (s *Listeners) StartServing() {
	s.mu.Lock()
	g, k := s.gate, s.keeper
	s.mu.Unlock()
	if k != nil {
		defer k.DropRest() // every port of the first state is open: the rest is gone
	}
	if g == nil {
		return
	}
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.open.Store(true)
	g.mu.Unlock()
	for _, l := range held {
		l.wake() // stale (paused, closed, running) ones return at once
	}
}
