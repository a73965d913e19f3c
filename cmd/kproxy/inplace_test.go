package main

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// writeInPlace rewrites path as many editors and config tools do: truncate,
// then write, here in two halves with a pause between them, so a reader
// that does not wait for the file to settle sees it empty or half-written.
// The pause is the scenario, not synchronisation.
func writeInPlace(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	half := len(content) / 2
	if _, err := f.WriteString(content[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := f.WriteString(content[half:]); err != nil {
		t.Fatal(err)
	}
}

// 50 in-place rewrites of the manifest under connection-per-request load:
// no request fails (kproxy never applies the empty or half-written file),
// identical rewrites apply nothing, and real changes are applied.
func TestInPlaceRewritesUnderLoadLoseNothing(t *testing.T) {
	port := backendsOn(t, "127.0.36.11", "127.0.36.12", "127.0.36.13")
	others := service("api", "127.0.36.2", 18080, port, "127.0.36.11") + service("db", "127.0.36.3", 18080, port, "127.0.36.13")
	a := service("web", "127.0.36.1", 18080, port, "127.0.36.11", "127.0.36.12") + others
	b := service("web", "127.0.36.1", 18080, port, "127.0.36.12", "127.0.36.13") + others
	in := startKproxy(t, a)
	for _, id := range []string{"default/web:tcp/TCP", "default/api:tcp/TCP", "default/db:tcp/TCP"} {
		in.waitFor(t, id+" listening", func(m map[string]*messages.ServicePortState) bool {
			return len(m[id].GetListenAddresses()) > 1
		})
	}

	// Load: four clients, a new connection per request, until stopped
	// (and at most a minute).
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addrs := []string{"127.0.36.1:18080", "127.0.36.2:18080", "127.0.36.3:18080"}
			for n := i; time.Now().Before(deadline); n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tryReadName(addrs[n%len(addrs)]); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}

	stats := func() *messages.WatcherStats {
		s, err := in.proxy.WatcherStats()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	generation := func() int64 {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.latest["default/web:tcp/TCP"].GetGeneration()
	}

	// 25 identical rewrites: nothing is applied.
	flushes0, gen0 := stats().GetFlushes(), generation()
	for range 25 {
		writeInPlace(t, in.path, a)
		time.Sleep(50 * time.Millisecond)
	}
	// A real change after them proves the watcher was reading all along.
	writeInPlace(t, in.path, b)
	in.waitFor(t, "web on .12 and .13", func(m map[string]*messages.ServicePortState) bool {
		eps := m["default/web:tcp/TCP"].GetEndpoints()
		return len(eps) == 2 && eps[0].GetIps()[0] == "127.0.36.12" && eps[1].GetIps()[0] == "127.0.36.13"
	})
	if flushes, gen := stats().GetFlushes(), generation(); flushes != flushes0+1 || gen != gen0+1 {
		t.Errorf("25 identical rewrites and one change: %d flushes and generation %d -> %d; want exactly one of each", flushes-flushes0, gen0, gen)
	}

	// 24 more, alternating real changes, each applied before the next.
	for i := range 24 {
		content, want := a, "127.0.36.11"
		if i%2 == 1 {
			content, want = b, "127.0.36.13"
		}
		writeInPlace(t, in.path, content)
		in.waitFor(t, "web updated", func(m map[string]*messages.ServicePortState) bool {
			eps := m["default/web:tcp/TCP"].GetEndpoints()
			return len(eps) == 2 && (eps[0].GetIps()[0] == want || eps[1].GetIps()[0] == want)
		})
	}
	close(stop)
	wg.Wait()
	t.Logf("50 in-place rewrites: %d requests served, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed during in-place rewrites (first: %v)", failed.Load(), ok.Load()+failed.Load(), firstErr.Load())
	}
	if ok.Load() == 0 {
		t.Error("no request was served")
	}
}
