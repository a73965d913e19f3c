package harness

import "time"

// listenWatch is what watchListeners reports: when each address began to
// listen, and a channel per address closed at that moment, so a probe of
// whether it forwards can wait for it instead of dialing a closed port.
type listenWatch struct {
	seen []time.Duration
	up   []chan struct{}
	done chan struct{}
}

func newListenWatch(n int) *listenWatch {
	w := &listenWatch{seen: make([]time.Duration, n), up: make([]chan struct{}, n), done: make(chan struct{})}
	for i := range w.up {
		w.up[i] = make(chan struct{})
	}
	return w
}

// times waits for the scan to end and returns when each address began to
// listen (zero for addresses never seen).
func (w *listenWatch) times() []time.Duration {
	<-w.done
	return w.seen
}

// listening is closed once address i listens.
func (w *listenWatch) listening(i int) <-chan struct{} { return w.up[i] }
