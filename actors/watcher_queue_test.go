package actors

import (
	"slices"
	"sync"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// poisonStore is the file source's Store taking events as the Kubernetes
// source's Objects does (an Applier), except that applying an event about
// the service "default/poison" panics in the Watcher's flush.
type poisonStore struct {
	*watcher.Store
	mu       sync.Mutex
	poisoned int
	applied  []string
}

func (s *poisonStore) Apply(e watcher.Event) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Service == "default/poison" {
		s.poisoned++
		panic("a poisoned event")
	}
	s.applied = append(s.applied, e.Service)
	return []string{e.Service}
}

// An event whose handling panics crashes the Watcher once: it is off the
// queue before it is handled, and the event queued behind it in the same
// flush is applied by the next incarnation.
func TestWatcherHandlesAPoisonedEventOnce(t *testing.T) {
	store := &poisonStore{Store: watcher.NewStore()}
	p := startProxyWith(t, Config{View: store})
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	changed := store.Replace([]*messages.ServicePortEndpoints{spe(svcPort("after", messages.Protocol_TCP, "127.0.31.1", 18081), endpoints(addrs...))}, nil, false)
	// Queued before the source is synced, so the sync's flush takes both.
	p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: "default/poison"})
	p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: changed[0]})
	p.SourceSynced()
	w.listening(t, key("after", messages.Protocol_TCP).ID(), 1, 1)
	if _, err := p.WatcherStats(); err != nil { // behind the restart's flush
		t.Fatal(err)
	}
	store.mu.Lock()
	poisoned, applied := store.poisoned, slices.Clone(store.applied)
	store.mu.Unlock()
	if poisoned != 1 {
		t.Errorf("the poisoned event was handled %d times, want once", poisoned)
	}
	if !slices.Equal(applied, changed) {
		t.Errorf("applied %q, want the event behind the poisoned one, %q, once", applied, changed)
	}
	if p.Restarts() < 1 {
		t.Errorf("no restart: the poisoned event's panic did not reach supervision")
	}
}
