package actortest

import (
	"sync"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// States records every ServicePortState a tree publishes and lets a test
// wait for a condition on the latest ones.
type States struct {
	mu     sync.Mutex
	cond   *sync.Cond
	latest map[string]*messages.ServicePortState
}

// WatchStates subscribes to a tree's states (actors.Proxy.Subscribe)
// until the test ends.
func WatchStates(t *testing.T, subscribe func(func(*messages.ServicePortState)) (unsubscribe func())) *States {
	w := &States{latest: map[string]*messages.ServicePortState{}}
	w.cond = sync.NewCond(&w.mu)
	unsub := subscribe(func(st *messages.ServicePortState) {
		w.mu.Lock()
		w.latest[st.GetKey().ID()] = st
		w.mu.Unlock()
		w.cond.Broadcast()
	})
	t.Cleanup(unsub)
	return w
}

// Wait blocks until ok holds for the latest states, by service port ID,
// or fails the test after 10 s.
func (w *States) Wait(t *testing.T, what string, ok func(map[string]*messages.ServicePortState) bool) {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, w.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(10 * time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	for !ok(w.latest) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		w.cond.Wait()
	}
}
