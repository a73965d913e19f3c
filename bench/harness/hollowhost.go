package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/watcher"
)

// A host of hollow nodes is a child process (kproxy-bench hollow-host, or
// a test binary re-executing its hollow test) told by its environment
// which nodes to run and whose core they follow; it talks to its parent
// in lines on stdin and stdout, its own prefixed "hollow: " so that other
// output (a test framework's) passes by:
//
//	host:   hollow: ready               every node holds its first state
//	parent: expect hollow/svc-I UNIXNS  (a line per changed service)
//	parent: end
//	host:   hollow: {"Hist":…,"Lost":N} once every node holds every last change, or after a minute
const (
	// EnvHollowHost marks a hollow host process (a test binary tells its
	// host run from its own by it).
	EnvHollowHost  = "KPROXY_HOLLOW_HOST"
	envHollowCore  = "KPROXY_HOLLOW_CORE"
	envHollowNodes = "KPROXY_HOLLOW_NODES"
	// envHollowProfile names the directory a host writes its CPU
	// profile of the churn and its heap after it to.
	envHollowProfile = "KPROXY_HOLLOW_PROFILE"
	hollowPrefix     = "hollow: "
)

// HollowNode is one hollow node's source: a core's view of it over
// remoting, or (a test's) its own informers on an API server, as
// kube-proxy on every node.
type HollowNode interface {
	Start(ctx context.Context, notify func(watcher.Event)) error
	Stop()
	// TriggerTime is the last-change-trigger-time of the service's state
	// in the node's store.
	TriggerTime(service string) time.Time
	// Changed is the services event e changed in the node's store.
	Changed(e watcher.Event) []string
}

// NewHollowNode makes node's source; nil: each node follows the core.
type NewHollowNode func(node string) (HollowNode, error)

// remoteNode is a hollow node following the core: a real backend source,
// its own remoting (listener and connections to the core).
type remoteNode struct{ *remote.Source }

func (n remoteNode) Changed(e watcher.Event) []string { return []string{e.Service} }

// hollowReport is a host's report: its nodes' change → store latencies
// (µs) and how many node × service pairs missed their last change.
type hollowReport struct {
	Hist *hdrhistogram.Snapshot
	Lost int
}

// newLatencyHist holds change → store latencies in µs, up to 10 minutes.
func newLatencyHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// ServeHollowHost runs the hollow nodes its environment names, recording
// change → store from each change's trigger time, and reports to the
// parent on out once it has said which changes came last on in.
func ServeHollowHost(in io.Reader, out io.Writer, newNode NewHollowNode) error {
	nodes := strings.Split(os.Getenv(envHollowNodes), ",")
	if os.Getenv(envHollowNodes) == "" {
		return fmt.Errorf("hollow host: no nodes ($%s)", envHollowNodes)
	}
	if newNode == nil {
		core := os.Getenv(envHollowCore)
		if core == "" {
			return fmt.Errorf("hollow host: no core ($%s)", envHollowCore)
		}
		newNode = func(node string) (HollowNode, error) {
			return remoteNode{remote.NewSource(remote.SourceConfig{Core: core, NodeName: node, Client: "hollow",
				Remote: remote.Config{Listen: "127.0.0.1:0"}, Log: hollowLog().With().Str("node", node).Logger()})}, nil
		}
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	hist := newLatencyHist()
	srcs := make([]HollowNode, 0, len(nodes))
	defer func() {
		for _, src := range srcs {
			src.Stop()
		}
	}()
	for _, node := range nodes {
		src, err := newNode(node)
		if err != nil {
			return fmt.Errorf("hollow node %s: %w", node, err)
		}
		ready := false
		// The consumer applies the objects (under mu: informers call from
		// their own goroutines).
		if err := src.Start(context.Background(), func(e watcher.Event) {
			mu.Lock()
			for _, svc := range src.Changed(e) {
				if at := src.TriggerTime(svc); ready && !at.IsZero() {
					_ = hist.RecordValue(int64(time.Since(at) / time.Microsecond))
				}
			}
			mu.Unlock()
			cond.Broadcast()
		}); err != nil {
			return fmt.Errorf("hollow node %s: %w", node, err)
		}
		mu.Lock()
		ready = true
		mu.Unlock()
		srcs = append(srcs, src)
	}
	if _, err := fmt.Fprintln(out, hollowPrefix+"ready"); err != nil {
		return fmt.Errorf("hollow host: %w", err)
	}
	profileDir := os.Getenv(envHollowProfile)
	if profileDir != "" {
		// What the host spends during the churn.
		stop, err := startCPUProfile(filepath.Join(profileDir, fmt.Sprintf("host-%d.cpu.pprof", os.Getpid())))
		if err != nil {
			return err
		}
		defer stop()
	}
	expect, err := readExpected(in)
	if err != nil {
		return err
	}
	if dir := profileDir; dir != "" {
		// What a host's nodes hold, after the churn.
		runtime.GC()
		if err := writeHeapProfile(filepath.Join(dir, fmt.Sprintf("host-%d.heap.pprof", os.Getpid()))); err != nil {
			return err
		}
	}
	// Wait (up to a minute) for every node to hold every last change.
	deadline := time.Now().Add(time.Minute)
	timer := time.AfterFunc(time.Minute, cond.Broadcast)
	defer timer.Stop()
	lost := 0
	mu.Lock()
	for {
		lost = 0
		for _, src := range srcs {
			for svc, at := range expect {
				// Trigger times go through RFC 3339 text: compare to the microsecond.
				if src.TriggerTime(svc).Before(at.Truncate(time.Microsecond)) {
					lost++
				}
			}
		}
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		cond.Wait()
	}
	res, err := json.Marshal(hollowReport{Hist: hist.Export(), Lost: lost})
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("hollow host's report: %w", err)
	}
	if _, err := fmt.Fprintln(out, hollowPrefix+string(res)); err != nil {
		return fmt.Errorf("hollow host: %w", err)
	}
	return nil
}

// readExpected reads the parent's "expect SERVICE UNIXNS" lines up to
// "end": which change of each service came last.
func readExpected(in io.Reader) (map[string]time.Time, error) {
	expect := map[string]time.Time{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "end" {
			return expect, nil
		}
		if len(f) == 3 && f[0] == "expect" {
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			expect[f[1]] = time.Unix(0, ns)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hollow host: read the expected changes: %w", err)
	}
	return nil, errors.New("hollow host: the parent went away before its end line")
}

// hollowLog is where the core and the hollow nodes log: nowhere, or their
// warnings to standard error with KPROXY_HOLLOW_LOG=1 (why nodes
// re-subscribed, a backend the core dropped).
func hollowLog() zerolog.Logger {
	if os.Getenv("KPROXY_HOLLOW_LOG") == "" {
		return zerolog.Nop()
	}
	return zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}
