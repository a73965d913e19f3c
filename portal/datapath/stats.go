package datapath

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Stats counts one service port's traffic. The data path updates it with
// atomics (no lock, no allocation per connection); metrics read it when
// scraped. Methods on a nil *Stats do nothing.
type Stats struct {
	ActiveConns     atomic.Int64
	Conns           atomic.Int64
	DialFailures    atomic.Int64
	BytesToEndpoint atomic.Int64 // client to endpoint
	BytesToClient   atomic.Int64 // endpoint to client
	ActiveFlows     atomic.Int64 // UDP
	Flows           atomic.Int64
	// Refused at a limit (see Limits).
	RefusedConns atomic.Int64
	RefusedFlows atomic.Int64
	// AcceptFailures counts accepts that failed and were retried (fd
	// exhaustion, injected or real).
	AcceptFailures atomic.Int64
	// udp are the UDP datagram counters, made by the first datagram:
	// with their cache-line padding they are 256 bytes that a TCP
	// service port never uses.
	udp atomic.Pointer[UDPStats]
}

// UDPStats count a service port's UDP datagrams read and sent, and the
// system calls that carried them, by direction: their ratio is the
// datagrams per call batching reaches (1 where there is no batching).
// Each direction's counters sit on cache lines of their own: the
// listener's goroutine counts one way, the flows' the other, per
// datagram.
type UDPStats struct {
	_          [64]byte
	ToEndpoint UDPCounts
	_          [64]byte
	ToClient   UDPCounts
	_          [64]byte
}

// UDP is the service port's UDP counters, nil until its first datagram.
func (s *Stats) UDP() *UDPStats {
	if s == nil {
		return nil
	}
	return s.udp.Load()
}

// UDPCounts counts one direction of a service port's UDP datagrams.
type UDPCounts struct {
	Received, ReceiveCalls atomic.Int64
	Sent, SendCalls        atomic.Int64
}

func (s *Stats) acceptFailed() {
	if s != nil {
		s.AcceptFailures.Add(1)
	}
}

func (s *Stats) dialFailed() {
	if s != nil {
		s.DialFailures.Add(1)
	}
}

func (s *Stats) copied(toEndpoint, toClient int64) {
	if s != nil {
		s.BytesToEndpoint.Add(toEndpoint)
		s.BytesToClient.Add(toClient)
	}
}

// StatsTable holds the Stats of every service port, by ID. Safe for
// concurrent use.
type StatsTable struct {
	mu sync.Mutex
	m  map[string]*Stats
}

// NewStatsTable returns an empty table.
func NewStatsTable() *StatsTable { return &StatsTable{m: map[string]*Stats{}} }

// For returns the Stats of service port id, made on first use. A nil
// table returns nil Stats (counting off).
func (t *StatsTable) For(id string) *Stats {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[id]
	if s == nil {
		s = &Stats{}
		t.m[id] = s
	}
	return s
}

// Get returns the Stats of service port id, or nil when it has none yet
// (a reader that must not make entries: the live view).
func (t *StatsTable) Get(id string) *Stats {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Delete drops a service port's Stats (it is gone).
func (t *StatsTable) Delete(id string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.m, id)
	t.mu.Unlock()
}

// Each calls fn for every service port, by ID order, at most limit of
// them (0: all); it returns how many it left out.
func (t *StatsTable) Each(limit int, fn func(id string, s *Stats)) (left int) {
	t.mu.Lock()
	ids := make([]string, 0, len(t.m))
	for id := range t.m {
		ids = append(ids, id)
	}
	stats := make(map[string]*Stats, len(t.m))
	for id, s := range t.m {
		stats[id] = s
	}
	t.mu.Unlock()
	sort.Strings(ids)
	if limit > 0 && len(ids) > limit {
		left = len(ids) - limit
		ids = ids[:limit]
	}
	for _, id := range ids {
		fn(id, stats[id])
	}
	return left
}

// received counts one read system call that returned n datagrams.
func (c *UDPCounts) received(n int) {
	c.ReceiveCalls.Add(1)
	c.Received.Add(int64(n))
}

// sent counts n datagrams sent with calls system calls.
func (c *UDPCounts) sent(n, calls int) {
	c.SendCalls.Add(int64(calls))
	c.Sent.Add(int64(n))
}

// udpCounts is the counters of one direction, made on first use
// (discarded when not counting).
func (s *Stats) udpCounts(toClient bool) *UDPCounts {
	if s == nil {
		return &discarded
	}
	u := s.udp.Load()
	if u == nil {
		u = new(UDPStats)
		if !s.udp.CompareAndSwap(nil, u) {
			u = s.udp.Load()
		}
	}
	if toClient {
		return &u.ToClient
	}
	return &u.ToEndpoint
}

// discarded takes the counts when there are no Stats.
var discarded UDPCounts
