package filesource

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/test/modeltest"
	"github.com/kproxy/kproxy/watcher"
)

// waitTimeout bounds every wait; polls run every 20ms, so reaching it
// means the behaviour under test is broken, not slow.
const waitTimeout = 5 * time.Second

// runningSource is a FileSource running in the background, observed
// through channels so tests wait for events instead of sleeping.
type runningSource struct {
	results chan *Result
	polls   atomic.Int64
	polled  chan struct{} // signalled (without blocking) after every poll
}

func startSource(t *testing.T, path string, mutate ...func(*FileSource)) *runningSource {
	t.Helper()
	rs := &runningSource{results: make(chan *Result, 16), polled: make(chan struct{}, 1)}
	src := NewFileSource(path, watcher.Options{}, 20*time.Millisecond, zerolog.Nop())
	for _, m := range mutate {
		m(src)
	}
	src.polled = func() {
		rs.polls.Add(1)
		select {
		case rs.polled <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.run(ctx, func(r *Result) { rs.results <- r })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Error("run did not return after cancel")
		}
	})
	return rs
}

// next waits for the next emitted result.
func (rs *runningSource) next(t *testing.T) *Result {
	t.Helper()
	select {
	case r := <-rs.results:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("no result emitted")
		return nil
	}
}

// waitPolls waits until n more polls have completed. Two polls after a
// change guarantee one that started after it.
func (rs *runningSource) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := rs.polls.Load() + n
	deadline := time.After(waitTimeout)
	for rs.polls.Load() < target {
		select {
		case <-rs.polled:
		case <-deadline:
			t.Fatalf("fewer than %d polls happened", n)
		}
	}
}

// pollsFor waits for polls until d has passed: the writer's pause in
// these tests, longer than fileSettle, with the source polling meanwhile.
func (rs *runningSource) pollsFor(t *testing.T, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		rs.waitPolls(t, 1)
	}
}

// assertQuiet checks that nothing was emitted.
func (rs *runningSource) assertQuiet(t *testing.T) {
	t.Helper()
	select {
	case r := <-rs.results:
		t.Fatalf("unexpected emission: %v", modeltest.KeyIDs(r.ServicePorts))
	default:
	}
}

func serviceYAML(name string) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + "}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n"
}

func assertKeys(t *testing.T, r *Result, want ...string) {
	t.Helper()
	if got := modeltest.KeyIDs(r.ServicePorts); !slices.Equal(got, want) {
		t.Fatalf("service ports = %v, want %v", got, want)
	}
}

func TestFileSourceEmitsInitiallyAndOnChange(t *testing.T) {
	path := writeFile(t, t.TempDir(), "svc.yaml", serviceYAML("web"))
	rs := startSource(t, path)
	assertKeys(t, rs.next(t), "default/web:/TCP")

	writeFile(t, filepath.Dir(path), "svc.yaml", serviceYAML("web")+"---\n"+serviceYAML("api"))
	assertKeys(t, rs.next(t), "default/api:/TCP", "default/web:/TCP")
}

func TestFileSourceIgnoresUnchangedContent(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "svc.yaml", serviceYAML("web"))
	rs := startSource(t, path)
	assertKeys(t, rs.next(t), "default/web:/TCP")

	// A touch changes the stat but not the content.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	rs.waitPolls(t, 2)
	rs.assertQuiet(t)

	// Neither does rewriting the same bytes, as an editor's save does.
	writeFile(t, dir, "svc.yaml", serviceYAML("web"))
	rs.waitPolls(t, 2)
	rs.assertQuiet(t)

	// A real change is still seen afterwards.
	writeFile(t, dir, "svc.yaml", serviceYAML("website"))
	assertKeys(t, rs.next(t), "default/website:/TCP")
}

func TestFileSourceReplaceByRename(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "svc.yaml", serviceYAML("web"))
	rs := startSource(t, path)
	assertKeys(t, rs.next(t), "default/web:/TCP")

	tmp := writeFile(t, t.TempDir(), "new.yaml", serviceYAML("api"))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	assertKeys(t, rs.next(t), "default/api:/TCP")
}

func TestFileSourceDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", serviceYAML("web"))
	rs := startSource(t, dir)
	assertKeys(t, rs.next(t), "default/web:/TCP")

	writeFile(t, dir, "b.yaml", serviceYAML("api"))
	assertKeys(t, rs.next(t), "default/api:/TCP", "default/web:/TCP")

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	assertKeys(t, rs.next(t), "default/api:/TCP")
}

// TestFileSourceMissingPath: an unreadable path emits nothing (an empty
// result would delete every service) until it can be read.
func TestFileSourceMissingPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "svc.yaml")
	rs := startSource(t, path)
	rs.waitPolls(t, 2)
	rs.assertQuiet(t)

	writeFile(t, dir, "svc.yaml", serviceYAML("web"))
	assertKeys(t, rs.next(t), "default/web:/TCP")
}

// TestFileSourceReportsErrors: a result with a rejected document is still
// emitted, carrying the error.
func TestFileSourceReportsErrors(t *testing.T) {
	bad := "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: 10.0.0.2, ports: [{port: 0}]}\n"
	path := writeFile(t, t.TempDir(), "svc.yaml", serviceYAML("web")+"---\n"+bad)
	rs := startSource(t, path)
	r := rs.next(t)
	assertKeys(t, r, "default/web:/TCP")
	assertErrors(t, r.Errors, []string{path + " document 2 (Service default/bad): spec.ports[0].port: 0 is not in 1-65535"})
}

// lockedBuffer is a log sink the poller writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// A bad document is logged once per change of it, not on every reload of
// the documents around it.
func TestFileSourceLogsEachRejectionOnce(t *testing.T) {
	bad := func(port int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {clusterIP: 10.0.0.2, ports: [{port: %d}]}\n", port)
	}
	dir := t.TempDir()
	path := writeFile(t, dir, "svc.yaml", serviceYAML("web")+"---\n"+bad(0))
	var logs lockedBuffer
	src := NewFileSource(path, watcher.Options{}, 20*time.Millisecond, zerolog.New(&logs))
	results := make(chan *Result, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.run(ctx, func(r *Result) { results <- r }) }()
	t.Cleanup(func() { cancel(); <-done })
	next := func() *Result {
		t.Helper()
		select {
		case r := <-results:
			return r
		case <-time.After(waitTimeout):
			t.Fatal("no result emitted")
			return nil
		}
	}

	next()
	writeFile(t, dir, "svc.yaml", serviceYAML("website")+"---\n"+bad(0))
	if r := next(); len(r.Errors) != 1 {
		t.Fatalf("errors = %v, want the bad document's", r.Errors)
	}
	if n := logs.count("manifest rejected"); n != 1 {
		t.Fatalf("the unchanged bad document was logged %d times, want once", n)
	}
	writeFile(t, dir, "svc.yaml", serviceYAML("website")+"---\n"+bad(70000))
	next()
	if n := logs.count("manifest rejected"); n != 2 {
		t.Fatalf("a changed bad document: %d rejections logged, want 2", n)
	}
}

// rewriteInPlace rewrites path as `cat > path` or a slow script does: the
// file is truncated, then written in two parts with pauses in between
// (the writer's pace, which is what this test is about).
func rewriteInPlace(t *testing.T, path, content string, pause time.Duration) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	half := len(content) / 2
	for _, part := range []string{"", content[:half], content[half:]} {
		if _, err := f.WriteString(part); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
	}
}

// A file rewritten in place is briefly empty, then half written: neither
// state is applied, only the finished file; an identical rewrite applies
// nothing.
func TestFileSourceNeverEmitsHalfWrittenFiles(t *testing.T) {
	a := serviceYAML("web") + "---\n" + serviceYAML("api")
	b := serviceYAML("web") + "---\n" + serviceYAML("db")
	path := writeFile(t, t.TempDir(), "svc.yaml", a)
	rs := startSource(t, path)
	assertKeys(t, rs.next(t), "default/api:/TCP", "default/web:/TCP")
	for i := range 6 {
		content, want := b, []string{"default/db:/TCP", "default/web:/TCP"}
		if i%2 == 1 {
			content, want = a, []string{"default/api:/TCP", "default/web:/TCP"}
		}
		rewriteInPlace(t, path, content, 30*time.Millisecond)
		assertKeys(t, rs.next(t), want...) // the first emission is the finished file
		rewriteInPlace(t, path, content, 30*time.Millisecond)
		rs.waitPolls(t, 10) // 10 polls of 20 ms: well past the settle time
		rs.assertQuiet(t)
	}
}

// TestFileSourceStartNotifiesChangedServices: Start returns once the first
// read is in the store; a rewrite notifies only the services it changed.
func TestFileSourceStartNotifiesChangedServices(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "svc.yaml", serviceYAML("web")+"---\n"+serviceYAML("api"))
	src := NewFileSource(path, watcher.Options{}, 20*time.Millisecond, zerolog.Nop())
	polled := make(chan struct{}, 1)
	src.polled = func() {
		select {
		case polled <- struct{}{}:
		default:
		}
	}
	events := make(chan watcher.Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := src.Start(ctx, func(e watcher.Event) { events <- e }); err != nil {
		t.Fatal(err)
	}
	if got := src.ServiceNames(); !slices.Equal(got, []string{"default/api", "default/web"}) {
		t.Fatalf("services after Start = %v", got)
	}
	for _, want := range []string{"default/api", "default/web"} {
		if e := <-events; e.Service != want || e.Kind != watcher.KindFile {
			t.Fatalf("event %+v, want File %s", e, want)
		}
	}

	writeFile(t, filepath.Dir(path), "svc.yaml", serviceYAML("web")+"---\n"+serviceYAML("api")+"---\n"+serviceYAML("db"))
	select {
	case e := <-events:
		if e.Service != "default/db" {
			t.Fatalf("event for %s, want only default/db", e.Service)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event after adding a service")
	}
	// The poll that read the change has notified everything once it ends.
	<-polled
	<-polled
	select {
	case e := <-events:
		t.Fatalf("unexpected second event %+v", e)
	default:
	}
}
