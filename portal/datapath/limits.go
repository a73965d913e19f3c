package datapath

import (
	"sync/atomic"
)

// Limits bound what clients can make kproxy hold: TCP connections and UDP
// flows, per service port and for the process, as HAProxy's maxconn
// (global and per frontend) and Envoy's connection and UDP session limits
// do. At a limit a new TCP connection is reset and a new UDP flow's
// datagram dropped; both are counted. Existing connections and flows are
// never touched, so a flood on one service port cannot take the others'
// sockets, nor the control plane's (see DefaultLimits).
type Limits struct {
	// ConnsPerServicePort and FlowsPerServicePort bound one service port;
	// 0 means no bound.
	ConnsPerServicePort int64
	FlowsPerServicePort int64
	// MaxConns and MaxFlows bound the process; 0 means no bound.
	MaxConns int64
	MaxFlows int64

	conns, flows               atomic.Int64
	refusedConns, refusedFlows atomic.Int64
}

// fd costs, counted as HAProxy counts them: a proxied TCP connection
// holds two sockets, and a splice pipe (two fds) only while bytes move;
// pipes are bounded apart, at one per four connections (HAProxy's
// maxpipes), so a connection costs 2.5 fds. A UDP flow holds one socket.
const (
	fdsPerConn   = 2
	connsPerPipe = 4
	fdsPerPipe   = 2
	fdsPerFlow   = 1
)

// MaxPipes bounds the process's splice pipes, in use or pooled (two fds
// each; SetMaxPipes applies it): a quarter of the connection bound, none
// without one. A bulk chunk that finds none is copied through memory.
func (l *Limits) MaxPipes() int64 {
	if l.MaxConns <= 0 {
		return 0
	}
	return max(1, l.MaxConns/connsPerPipe)
}

// ControlPlaneFDs is kept back from the data path for the API watch,
// health, metrics, listeners and rules, and from listeners for the rest.
func ControlPlaneFDs(nofile int64) int64 { return max(1024, nofile/20) }

// DefaultLimits derives the process bounds from the fd limit: after the
// control plane's share, TCP connections (with their pipes) may use up to
// 60% of what is left and UDP flows 40%, so neither kind starves the
// other. A service port may take at most half of each, so one flooded
// service port leaves room for the rest.
func DefaultLimits(nofile int64) *Limits {
	avail := nofile - ControlPlaneFDs(nofile)
	if avail < 100 {
		avail = 100
	}
	l := &Limits{MaxConns: avail * 6 / 10 * connsPerPipe / (fdsPerConn*connsPerPipe + fdsPerPipe), MaxFlows: avail * 4 / 10 / fdsPerFlow}
	l.ConnsPerServicePort, l.FlowsPerServicePort = max(1, l.MaxConns/2), max(1, l.MaxFlows/2)
	return l
}

// acquire takes one unit of both counters within their bounds.
func acquire(sp *atomic.Int64, spMax int64, proc *atomic.Int64, procMax int64) bool {
	if !take(sp, spMax) {
		return false
	}
	if !take(proc, procMax) {
		sp.Add(-1)
		return false
	}
	return true
}

func take(n *atomic.Int64, bound int64) bool {
	for {
		cur := n.Load()
		if bound > 0 && cur >= bound {
			return false
		}
		if n.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// unit is what a limit counts: TCP connections or UDP flows.
type unit int

const (
	conns unit = iota
	flows
)

// counters are a service port's counters of u: held, total, refused.
func (s *Stats) counters(u unit) (active, total, refused *atomic.Int64) {
	if u == flows {
		return &s.ActiveFlows, &s.Flows, &s.RefusedFlows
	}
	return &s.ActiveConns, &s.Conns, &s.RefusedConns
}

// bounds are the limits of u: per service port, and the process's count,
// bound and refusals.
func (l *Limits) bounds(u unit) (perServicePort int64, held *atomic.Int64, procMax int64, refused *atomic.Int64) {
	if u == flows {
		return l.FlowsPerServicePort, &l.flows, l.MaxFlows, &l.refusedFlows
	}
	return l.ConnsPerServicePort, &l.conns, l.MaxConns, &l.refusedConns
}

// admit takes one u for the service port counted in s (nil: not counted
// per service port) within the bounds, or counts a refusal. A nil
// *Limits admits everything.
func (l *Limits) admit(s *Stats, u unit) bool {
	var scratch atomic.Int64
	active, total, spRefused := &scratch, &scratch, &scratch
	if s != nil {
		active, total, spRefused = s.counters(u)
	}
	if l == nil {
		active.Add(1)
		total.Add(1)
		return true
	}
	perSP, held, procMax, refused := l.bounds(u)
	if !acquire(active, perSP, held, procMax) {
		refused.Add(1)
		spRefused.Add(1)
		return false
	}
	total.Add(1)
	return true
}

// release gives back what admit took.
func (l *Limits) release(s *Stats, u unit) {
	if s != nil {
		active, _, _ := s.counters(u)
		active.Add(-1)
	}
	if l != nil {
		_, held, _, _ := l.bounds(u)
		held.Add(-1)
	}
}

// AcquireConn admits a new TCP connection of the service port counted in
// s, or counts a refusal.
func (l *Limits) AcquireConn(s *Stats) bool { return l.admit(s, conns) }

// ReleaseConn gives back what AcquireConn took.
func (l *Limits) ReleaseConn(s *Stats) { l.release(s, conns) }

// AcquireFlow admits a new UDP flow, as AcquireConn.
func (l *Limits) AcquireFlow(s *Stats) bool { return l.admit(s, flows) }

// ReleaseFlow gives back what AcquireFlow took.
func (l *Limits) ReleaseFlow(s *Stats) { l.release(s, flows) }

// Counts returns the process-wide connections and flows held, and how many
// were refused at a limit.
func (l *Limits) Counts() (conns, flows, refusedConns, refusedFlows int64) {
	return l.conns.Load(), l.flows.Load(), l.refusedConns.Load(), l.refusedFlows.Load()
}
