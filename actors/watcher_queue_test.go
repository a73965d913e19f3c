package actors

import (
	"sync/atomic"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// poisonStore is the file source's Store, except that applying an event
// about the service "default/poison" panics in the Watcher's flush.
type poisonStore struct {
	*watcher.Store
	poisoned atomic.Int32
}

func (s *poisonStore) Apply(e watcher.Event) []string {
	if e.Service == "default/poison" {
		s.poisoned.Add(1)
		panic("a poisoned event")
	}
	return []string{e.Service}
}

// An event whose handling panics crashes the Watcher once: it is off the
// queue before it is handled, and the events queued beside it are applied
// by the next incarnation.
func TestWatcherHandlesAPoisonedEventOnce(t *testing.T) {
	store := &poisonStore{Store: watcher.NewStore()}
	p := startProxyWith(t, Config{View: store})
	w := watchState(t, p)
	p.SourceSynced()
	if _, err := p.WatcherStats(); err != nil {
		t.Fatal(err)
	}
	addrs := tcpBackends(t, 1)
	changed := store.Replace([]*messages.ServicePortEndpoints{spe(svcPort("after", messages.Protocol_TCP, "127.0.31.1", 18081), endpoints(addrs...))}, nil, false)
	p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: "default/poison"})
	for _, svc := range changed {
		p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: svc})
	}
	w.listening(t, key("after", messages.Protocol_TCP).ID(), 1, 1)
	// Another flush after the restart's: the poisoned event is not in it.
	// The second question is queued behind the flush the event asked for.
	p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: changed[0]})
	for range 2 {
		if _, err := p.WatcherStats(); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.poisoned.Load(); n != 1 {
		t.Errorf("the poisoned event was handled %d times, want once", n)
	}
	if p.Restarts() < 1 {
		t.Errorf("no restart: the poisoned event's panic did not reach supervision")
	}
}
