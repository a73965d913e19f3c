package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// lineWriter hands every write to the test.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// TestWatchIdleChangeAppliedAtOnce: kproxy watch --json paces its output
// as the Watcher paces changes, it does not delay it: with
// --min-sync-period an hour, two changes made while it is idle are each
// printed at once (the burst), and a third waits for the period.
func TestWatchIdleChangeAppliedAtOnce(t *testing.T) {
	orig, err := os.ReadFile("testdata/watch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "watch.yaml")
	replaceFile(t, manifest, string(orig))
	src := sourceFlags{source: "file:" + manifest, nodeName: "node-a", filePollInterval: 50 * time.Millisecond, minSyncPeriod: time.Hour}
	out := make(lineWriter, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watch(ctx, watchOptions{sourceFlags: src, json: true}, out, zerolog.Nop()) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	printed := func(what string, within time.Duration) string {
		t.Helper()
		select {
		case s := <-out:
			return s
		case <-time.After(within):
			t.Fatalf("%s: nothing printed within %v", what, within)
			return ""
		}
	}
	printed("the first state", 30*time.Second)
	for i, ip := range []string{"192.0.2.111", "192.0.2.112"} {
		replaceFile(t, manifest, strings.Replace(string(orig), "192.0.2.11]", ip+"]", 1))
		if got := printed(fmt.Sprintf("change %d", i+1), 30*time.Second); !strings.Contains(got, ip) {
			t.Fatalf("change %d printed without %s:\n%s", i+1, ip, got)
		}
	}
	replaceFile(t, manifest, string(orig))
	select {
	case s := <-out:
		t.Fatalf("a third change in a row was printed at once, not paced by --min-sync-period:\n%s", s)
	case <-time.After(time.Second):
	}
}
