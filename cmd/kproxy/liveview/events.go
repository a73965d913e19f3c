package liveview

import (
	"sync"
	"time"
)

// Event kinds on the stream (the page lists restart, change and storm).
const (
	kindRestart = "restart"
	kindChange  = "change"
	kindStorm   = "storm"
)

// Event is one entry of the event stream.
type Event struct {
	Seq         int64     `json:"seq"`
	Kind        string    `json:"kind"`
	At          time.Time `json:"at"`
	Text        string    `json:"text"`
	ServicePort string    `json:"servicePort,omitempty"`
	Role        string    `json:"role,omitempty"`
	Actor       string    `json:"actor,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// TookMs is a restart's duration: from the failure to the new
	// incarnation answering a message.
	TookMs float64 `json:"tookMs,omitempty"`
	// Row is the service port as it is when the event is sent (nil when
	// gone).
	Row *Row `json:"row,omitempty"`
}

// Bounds of the stream: what a new subscriber gets of the past, and how
// far a subscriber may fall behind before events are dropped for it (it
// is told how many).
const (
	historyLen    = 100
	subscriberLen = 4096
)

// hub fans events out to the stream's subscribers. Publishing never
// blocks: a subscriber that falls behind loses events and is told.
type hub struct {
	mu  sync.Mutex
	seq int64
	// history is a ring of the last historyLen events, the oldest at
	// first once full: shifting a slice copied 100 events per event,
	// 10,000 times when as many service ports start.
	history []Event
	first   int
	subs    map[*subscriber]struct{}
}

type subscriber struct {
	events  chan Event
	mu      sync.Mutex
	dropped int64
}

func newHub() *hub { return &hub{subs: map[*subscriber]struct{}{}} }

func (h *hub) publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Seq = h.seq
	if len(h.history) < historyLen {
		h.history = append(h.history, e)
	} else {
		h.history[h.first] = e
		h.first = (h.first + 1) % historyLen
	}
	for s := range h.subs {
		select {
		case s.events <- e:
		default:
			s.mu.Lock()
			s.dropped++
			s.mu.Unlock()
		}
	}
}

// subscribe returns a subscriber that gets the recent past, then every
// event from now on, until cancel.
func (h *hub) subscribe() (s *subscriber, past []Event, cancel func()) {
	s = &subscriber{events: make(chan Event, subscriberLen)}
	h.mu.Lock()
	past = append(append(make([]Event, 0, len(h.history)), h.history[h.first:]...), h.history[:h.first]...)
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s, past, func() {
		h.mu.Lock()
		delete(h.subs, s)
		h.mu.Unlock()
	}
}

// takeDropped returns and resets how many events s lost.
func (s *subscriber) takeDropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}
