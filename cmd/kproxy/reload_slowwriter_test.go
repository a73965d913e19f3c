package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// asSlowWriterEnv makes this test binary a manifest generator of its own
// process: slowWriterMain.
const asSlowWriterEnv = "KPROXY_TEST_BINARY_IS_SLOW_WRITER"

// slowWriterMain rewrites a manifest in place as a slow generator does:
// one open file, truncated, the first part written, a pause, the second
// part written, closed. Arguments: path, pause; stdin: the two parts
// separated by a NUL byte.
func slowWriterMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: PATH PAUSE < PART1 NUL PART2")
		return 2
	}
	pause, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	first, second, _ := bytes.Cut(in, []byte{0})
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := f.Write(first); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.Sleep(pause) // the generator's own pace: the scenario under test
	if _, err := f.Write(second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestSlowInPlaceWriter: a generator in another process truncates the
// manifest, writes the Service, pauses longer than any settle time (300 ms,
// 1 s), then writes the EndpointSlice, all through one open file. kproxy
// must apply only what the writer closed: never the Service without
// endpoints in between, one update per rewrite that changed something and
// none for an identical one, and no failed request under load.
func TestSlowInPlaceWriter(t *testing.T) {
	const id = "default/alpha:tcp/TCP"
	port := backendsOn(t, "127.0.41.11", "127.0.41.12", "127.0.41.13")
	setA := []string{"127.0.41.11", "127.0.41.12"}
	setB := []string{"127.0.41.12", "127.0.41.13"}
	manifest := func(eps []string) string { return service("alpha", "127.0.41.1", 18080, port, eps...) }
	in := startKproxy(t, manifest(setA))
	in.waitListening(t, id, 2)

	// Every state alpha goes through, to catch a transient one.
	var mu sync.Mutex
	var empty []string
	unsubscribe := in.proxy.Subscribe(func(st *messages.ServicePortState) {
		if st.GetKey().ID() == id && (st.GetDeleted() || len(st.GetEndpoints()) == 0) {
			mu.Lock()
			empty = append(empty, fmt.Sprintf("generation %d deleted=%v endpoints=%d", st.GetGeneration(), st.GetDeleted(), len(st.GetEndpoints())))
			mu.Unlock()
		}
	})
	defer unsubscribe()

	load := startConnLoad(t, 4, time.Minute, "127.0.41.1:18080")
	start := in.watcherStats(t)
	type rewrite struct {
		pause  time.Duration
		change bool
	}
	plan := []rewrite{{300 * time.Millisecond, false}, {time.Second, false}, {300 * time.Millisecond, true},
		{time.Second, false}, {time.Second, true}, {300 * time.Millisecond, false}}
	current, changed := setA, 0
	for i, rw := range plan {
		stats := in.watcherStats(t)
		if rw.change {
			current, changed = otherSet(current, setA, setB), changed+1
		}
		from := len(in.logs.String()) // the writer's process may close and be read before it is reaped
		in.rewriteSlowly(t, manifest(current), rw.pause)
		in.waitLogged(t, from, "manifest touched but content unchanged", "manifests loaded")
		if !rw.change {
			if got := in.watcherStats(t); !sameStats(got, stats) {
				t.Fatalf("rewrite %d (pause %v): identical rewrite applied something: %v -> %v", i, rw.pause, stats, got)
			}
			continue
		}
		in.waitFor(t, "alpha on its new endpoints", func(m map[string]*messages.ServicePortState) bool {
			return sameEndpoints(m[id], current)
		})
		if got := in.watcherStats(t); got.GetFlushes() != stats.GetFlushes()+1 || got.GetChanges() != stats.GetChanges()+1 {
			t.Fatalf("rewrite %d (pause %v): one change should be one flush of one change: %v -> %v", i, rw.pause, stats, got)
		}
	}
	load.stop()

	if d := in.watcherStats(t).GetFlushes() - start.GetFlushes(); d != int64(changed) {
		t.Errorf("%d updates for %d changing rewrites", d, changed)
	}
	mu.Lock()
	if len(empty) > 0 {
		t.Errorf("alpha was applied without endpoints %d times: %v", len(empty), empty)
	}
	mu.Unlock()
	load.checkOverlappedRewrites(t, 100)
}

// rewriteSlowly runs slowWriterMain in its own process, splitting the
// manifest between its Service and its EndpointSlice, and waits for it.
func (in *instance) rewriteSlowly(t *testing.T, manifest string, pause time.Duration) {
	t.Helper()
	cut := strings.Index(manifest, "---\napiVersion: discovery.k8s.io/v1")
	if cut <= 0 {
		t.Fatal("test bug: no EndpointSlice in the manifest")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, in.path, pause.String())
	cmd.Env = append(os.Environ(), asSlowWriterEnv+"=1")
	cmd.Stdin = strings.NewReader(manifest[:cut] + "\x00" + manifest[cut:])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("slow writer: %v: %s", err, out)
	}
}
