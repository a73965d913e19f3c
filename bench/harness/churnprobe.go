package harness

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// applyLimit is how long a change may take to reach traffic before it
// counts as not applied.
const applyLimit = 30 * time.Second

// Probing: probeWorkers connections at most at once, each worker pausing
// churnProbePause after a probe that did not see its change yet. kproxy
// announces nothing per change, so connecting is how a client sees it;
// bounding the probes keeps the load they add fixed however many changes
// are pending (one prober per change made the probes themselves the load
// once changes queued up).
const (
	churnProbers    = 16
	churnProbePause = 5 * time.Millisecond
)

// churnProbersFor is the default probers for rate changes a second: 16,
// and one per 16 changes/s above 256/s. A change needs at least one
// probe (a connection through kproxy to a backend): 16 probers keep up
// with 1,000 changes a second only while a probe takes under 16 ms, which
// a loaded 2-core machine exceeds: changes then queue for their first
// probe, and the latency measured is the queue's rather than kproxy's.
func churnProbersFor(rate float64) int {
	return max(churnProbers, int(rate/16))
}

type outcome int

const (
	applied outcome = iota
	superseded
	notApplied
)

// pendingChange is a change waiting to be seen by a connection.
type pendingChange struct {
	addr, want string
	changed    time.Time
	stale      func() bool // a later change of the same service replaced it
	done       func(time.Duration, outcome)
}

// prober probes pending changes in turn (first in, first out) until each
// is applied, superseded or past applyLimit.
type prober struct {
	queue   chan *pendingChange
	pending sync.WaitGroup
	workers sync.WaitGroup
	// probes counts the connections made: many per change says the
	// probes' round through the pending changes, not kproxy, may be what
	// a change's latency measures.
	probes atomic.Int64
}

// startProber can hold up to capacity changes (every change of a run),
// probed by workers clients.
func startProber(ctx context.Context, capacity, workers int) *prober {
	p := &prober{queue: make(chan *pendingChange, capacity)}
	for range workers {
		p.workers.Add(1)
		go p.work(ctx)
	}
	return p
}

func (p *prober) add(c *pendingChange) {
	p.pending.Add(1)
	p.queue <- c
}

func (p *prober) work(ctx context.Context) {
	defer p.workers.Done()
	for {
		var c *pendingChange
		select {
		case <-ctx.Done():
			return
		case c = <-p.queue:
		}
		if c == nil { // closed
			return
		}
		if c.stale() {
			c.done(0, superseded)
			p.pending.Done()
			continue
		}
		p.probes.Add(1)
		if name, err := readName(c.addr); err == nil && name == c.want {
			c.done(time.Since(c.changed), applied)
			p.pending.Done()
			continue
		}
		if time.Since(c.changed) > applyLimit {
			c.done(0, notApplied)
			p.pending.Done()
			continue
		}
		p.queue <- c // cannot block: the queue holds every change
		select {
		case <-ctx.Done():
			return
		case <-time.After(churnProbePause):
		}
	}
}

// wait returns once every change added is settled (or ctx ends), and
// stops the workers.
func (p *prober) wait(ctx context.Context) error {
	settled := make(chan struct{})
	go func() {
		p.pending.Wait()
		close(settled)
	}()
	var err error
	select {
	case <-settled:
		close(p.queue)
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.workers.Wait()
	return err
}

// readName connects and reads the backend's name line.
func readName(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}
