package datapath

import (
	"net"
	"sync"
	"time"
)

// workers runs the data path's per-connection goroutines (a connection's
// handler, its client-to-endpoint copy) on goroutines kept for a moment
// after their last one ended, as fasthttp's worker pool does. A new
// goroutine starts with a small stack, and the handler's dial (Go's net
// package) grows it twice, copying it each time, on every proxied
// connection; a kept goroutine has its grown stack already.
// Each connection still has goroutines of its own while it lives (a
// stalled one holds its own, and the next connection gets another), and
// a panic in one is recovered and ends only that connection.
var workers = &workerPool{maxIdle: 256, idleFor: 500 * time.Millisecond}

// workerPool keeps idle goroutines, most recently used last, for at
// most idleFor (a sweep every idleFor ends those idle longer), and at
// most maxIdle of them.
type workerPool struct {
	maxIdle int
	idleFor time.Duration

	mu       sync.Mutex
	idle     []*worker
	sweeping bool // a sweeper goroutine runs (only while some are idle)
}

type worker struct {
	tasks chan task
	since time.Time // idle since
}

// task is one goroutine's work: a connection to handle, or a pair's
// client-to-endpoint copy.
type task struct {
	p    *TCPProxy
	conn *net.TCPConn
	pair *pair
	seed dialSeed // where conn's dial starts
	fn   func()   // any other work: a dial that must not run on the accepting goroutine, tests
}

func (t task) run() {
	if t.fn != nil {
		t.fn()
		return
	}
	if t.pair != nil {
		t.pair.copyToBackend()
		return
	}
	t.p.handle(t.conn, t.seed)
}

// recovered ends the connection of a task that panicked (the handler
// recovers its own; this is for the copy), and logs it.
func (t task) recovered(r any) {
	if t.pair == nil {
		return
	}
	t.pair.client.Close()
	t.pair.backend.Close()
	if p := t.pair.proxy; p != nil {
		p.event(p.log().Error()).Interface("panic", r).Msg("tcp copy panicked")
	}
}

// Go runs t on an idle goroutine, or a new one.
func (wp *workerPool) Go(t task) {
	wp.mu.Lock()
	if n := len(wp.idle); n > 0 {
		w := wp.idle[n-1]
		wp.idle[n-1] = nil
		wp.idle = wp.idle[:n-1]
		wp.mu.Unlock()
		w.tasks <- t
		return
	}
	wp.mu.Unlock()
	go wp.work(t)
}

// work runs t, then the tasks given to it while it is idle, until it is
// swept or the pool has idle goroutines enough.
func (wp *workerPool) work(t task) {
	var w *worker
	for {
		runTask(t)
		if w == nil {
			w = &worker{tasks: make(chan task, 1)}
		}
		if !wp.release(w) {
			return
		}
		var ok bool
		if t, ok = <-w.tasks; !ok {
			return // swept
		}
	}
}

func runTask(t task) {
	defer func() {
		if r := recover(); r != nil {
			t.recovered(r)
		}
	}()
	t.run()
}

// release makes w idle; false when enough are.
func (wp *workerPool) release(w *worker) bool {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	if len(wp.idle) >= wp.maxIdle {
		return false
	}
	w.since = time.Now()
	wp.idle = append(wp.idle, w)
	if !wp.sweeping {
		wp.sweeping = true
		go wp.sweep()
	}
	return true
}

// sweep ends goroutines idle for idleFor, every idleFor, until none is
// idle.
func (wp *workerPool) sweep() {
	t := time.NewTicker(wp.idleFor)
	defer t.Stop()
	for range t.C {
		wp.mu.Lock()
		cutoff := time.Now().Add(-wp.idleFor)
		n := 0
		for n < len(wp.idle) && wp.idle[n].since.Before(cutoff) {
			close(wp.idle[n].tasks)
			n++
		}
		wp.idle = append(wp.idle[:0], wp.idle[n:]...)
		clear(wp.idle[len(wp.idle):cap(wp.idle)])
		if len(wp.idle) == 0 {
			wp.sweeping = false
			wp.mu.Unlock()
			return
		}
		wp.mu.Unlock()
	}
}
