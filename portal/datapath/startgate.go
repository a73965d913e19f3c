package datapath

import (
	"sync"
	"sync/atomic"
)

// The start gate: at a process's start its service ports open one after
// another, and a port served as soon as it listens takes the CPU the
// others need to open (on a 10,000-port start, connections to the first
// ports would delay the last by as much again). HoldServing makes parked
// sockets wait until StartServing: they listen, the kernel completes
// connections into their backlog and queues datagrams, and the first
// accept comes once every port of the first state is open, as a proxy
// that opens all its frontends before it serves any. Where sockets do
// not park (not Linux), they serve at once.

var (
	gateMu sync.Mutex
	gate   atomic.Pointer[chan struct{}]
)

// HoldServing holds parked sockets' first wake until StartServing. Call
// it before the first listener opens.
func HoldServing() {
	gateMu.Lock()
	defer gateMu.Unlock()
	if gate.Load() == nil {
		ch := make(chan struct{})
		gate.Store(&ch)
	}
}

// StartServing lets held sockets serve; later calls do nothing.
func StartServing() {
	gateMu.Lock()
	defer gateMu.Unlock()
	if ch := gate.Load(); ch != nil {
		select {
		case <-*ch:
		default:
			close(*ch)
		}
	}
}

// waitServing returns once serving is not held.
func waitServing() {
	if ch := gate.Load(); ch != nil {
		<-*ch
	}
}
