package harness

import "time"

// listenWatch is what watchListeners reports: when each address began to
// listen, and the addresses' indices in the order they began to, so a
// probe of whether they forward can take each port as soon as it
// listens, instead of dialing closed ports or waiting on one port while
// others are already up.
type listenWatch struct {
	seen  []time.Duration
	order chan int // every index once: as it is seen listening, or when the scan gives up
	done  chan struct{}
}

func newListenWatch(n int) *listenWatch {
	return &listenWatch{seen: make([]time.Duration, n), order: make(chan int, n), done: make(chan struct{})}
}

// times waits for the scan to end and returns when each address began to
// listen (zero for addresses never seen).
func (w *listenWatch) times() []time.Duration {
	<-w.done
	return w.seen
}

// giveUp hands out the addresses not seen listening, for a scan that
// cannot go on (the kernel refused a dump): their probes dial them
// until they answer, as without a watch.
func (w *listenWatch) giveUp() {
	for i, s := range w.seen {
		if s == 0 {
			w.order <- i
		}
	}
}
