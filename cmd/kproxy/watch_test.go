package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var update = flag.Bool("update", false, "rewrite golden files")

// signalWriter records writes and signals the first one.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
	once  sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.once.Do(func() { close(w.wrote) })
	return len(p), nil
}

// runWatch runs kproxy watch with o until its first state is written.
func runWatch(t *testing.T, o watchOptions) string {
	t.Helper()
	out := &signalWriter{wrote: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// Not a TestWriter: client-go's logs are routed process-wide and may
	// arrive after this test ended.
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kproxy watch logs:\n%s", logs.String())
		}
	})
	go func() { done <- watch(ctx, o, out, zerolog.New(logs)) }()
	select {
	case <-out.wrote:
	case <-time.After(60 * time.Second):
		t.Fatal("watch printed nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.buf.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (go test -update to accept):\n got: %s\nwant: %s", path, got, want)
	}
}

func TestWatchJSONGoldenFile(t *testing.T) {
	src := sourceFlags{source: "file:testdata/watch.yaml", nodeName: "node-a", filePollInterval: time.Hour, minSyncPeriod: time.Millisecond}
	golden(t, "watch.golden", runWatch(t, watchOptions{sourceFlags: src, json: true}))

	// --callout gets the same JSON on its standard input.
	captured := filepath.Join(t.TempDir(), "callout.json")
	runWatch(t, watchOptions{sourceFlags: src, callout: "cat > " + captured + "; echo done"})
	got, err := os.ReadFile(captured)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "watch.golden", string(got)+"\n")
}
