package main

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connLoad is a connection-per-request client load: every request is a new
// TCP connection that must read a backend's name. It counts outcomes, so a
// test can assert that nothing was lost while it changed kproxy underneath.
type connLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string       // the first failures, for the report
	names      map[string]int // backend name -> requests it answered
	stopOnce   sync.Once
	stopCh     chan struct{}
	wg         sync.WaitGroup
}

// startConnLoad runs clients goroutines, each sending requests to addrs in
// turn until stop is called or max has passed (the load ends by itself if
// the test forgets it). The short pause between requests keeps the load
// bounded on a small shared machine; it is pacing, not synchronisation.
func startConnLoad(t *testing.T, clients int, max time.Duration, addrs ...string) *connLoad {
	l := &connLoad{names: map[string]int{}, stopCh: make(chan struct{})}
	deadline := time.Now().Add(max)
	for c := 0; c < clients; c++ {
		l.wg.Add(1)
		go func(c int) {
			defer l.wg.Done()
			for i := c; time.Now().Before(deadline); i++ {
				select {
				case <-l.stopCh:
					return
				default:
				}
				l.request(addrs[i%len(addrs)])
				time.Sleep(2 * time.Millisecond)
			}
		}(c)
	}
	t.Cleanup(l.stop)
	return l
}

func (l *connLoad) request(addr string) {
	name, err := tryReadName(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed.Add(1)
		if len(l.errs) < 10 {
			l.errs = append(l.errs, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), err))
		}
		return
	}
	l.ok.Add(1)
	l.names[name]++
}

// stop ends the load and waits for the requests in flight.
func (l *connLoad) stop() {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.wg.Wait()
}

// checkOverlappedRewrites, once the load is stopped, logs its outcome and
// fails the test if a request failed or fewer than minOK succeeded (the
// load then did not overlap the rewrites it was to witness).
func (l *connLoad) checkOverlappedRewrites(t *testing.T, minOK int64) {
	t.Helper()
	ok, failed := l.ok.Load(), l.failed.Load()
	t.Logf("%d requests, %d failed, by backend %v", ok+failed, failed, l.names)
	if failed != 0 {
		t.Errorf("%d of %d requests failed; first: %s", failed, ok+failed, strings.Join(l.errs, "; "))
	}
	if ok < minOK {
		t.Errorf("only %d requests succeeded: the load did not overlap the rewrites", ok)
	}
}
