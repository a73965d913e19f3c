package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/kproxy/kproxy/watcher"
)

// The hollow scenario measures a core serving N hollow nodes, as
// kubemark's hollow nodes measure kube-proxy: each node a real backend
// Source with its own remoting (its own listener and connections to the
// core), 100 per child process, so the core's CPU and memory are this
// process's own. The core follows the Kubernetes source's objects
// (Services, EndpointSlices and Nodes, as informers hand them over; see
// HollowCluster). Churn: Rate endpoint changes/s for Duration, each
// stamped with its last-change-trigger-time, which the core hands on
// with the change; a node measures change → its store from it. At the
// end every node must hold every changed service's last change (0 lost).

// ScenarioHollow is the hollow nodes scenario; it runs alone, its own
// table, as it measures the core in the harness's process rather than a
// kproxy it starts.
const ScenarioHollow = "hollow"

// Hollow churn kinds (HollowOptions.Churn).
const (
	HollowChurnAll = "all"
	// HollowChurnAlike changes only services every node sees alike
	// (Cluster policy), to compare a change's cost across node counts.
	HollowChurnAlike = "alike"
)

// HollowOptions configure hollow rounds.
type HollowOptions struct {
	Nodes    []int         // a round per count
	Services int           // S services
	Rate     float64       // endpoint changes per second
	Duration time.Duration // of the churn
	Churn    string        // HollowChurnAll or HollowChurnAlike
	// Replicas is how many cores serve the nodes: more than one form a
	// protoactor cluster (in this process; figures are over all of them).
	Replicas int
	// Heartbeat is the core's heartbeat interval (0: its default).
	Heartbeat time.Duration
	// ProfileDir, when set, gets the core's CPU and heap profiles of each
	// round (core-N.cpu.pprof, core-N.heap.pprof).
	ProfileDir string
	// Host is the command that runs a host of hollow nodes
	// (ServeHollowHost): kproxy-bench hollow-host, or a test binary
	// running its hollow test.
	Host     []string
	Progress io.Writer // a line every 10 s of a long phase, or nil
}

// Validate checks the options.
func (o *HollowOptions) Validate() error {
	if len(o.Nodes) == 0 {
		return errors.New("hollow: no node counts")
	}
	for _, n := range o.Nodes {
		if n < 1 {
			return fmt.Errorf("hollow: %d nodes: want at least 1", n)
		}
	}
	if o.Services < 1 || o.Services > maxHollowServices {
		return fmt.Errorf("hollow: %d services: want 1 to %d", o.Services, maxHollowServices)
	}
	if o.Rate <= 0 || int(o.Duration.Seconds()*o.Rate) < 1 {
		return fmt.Errorf("hollow: %v changes/s for %v: want at least one change", o.Rate, o.Duration)
	}
	if o.Churn != HollowChurnAll && o.Churn != HollowChurnAlike {
		return fmt.Errorf("hollow churn %q: want %s or %s", o.Churn, HollowChurnAll, HollowChurnAlike)
	}
	if o.Churn == HollowChurnAlike && o.Services < 2 {
		return errors.New("hollow churn alike: want at least 2 services (svc-0 is Local)")
	}
	if len(o.Host) == 0 {
		return errors.New("hollow: no command to run the hosts of hollow nodes")
	}
	return nil
}

// HollowResult is one round's figures: a row of the table.
type HollowResult struct {
	Nodes, Services, Changes int
	Elapsed                  time.Duration // of the churn and the collection
	HollowStores
	CoreCPUPerChange time.Duration
	// NodeCPUPerChange is the hollow hosts' CPU over nodes and changes:
	// what a node's backend spends on a change (decoding, applying,
	// acknowledging), whether or not the change reached it.
	NodeCPUPerChange time.Duration
	// DeltasPerNodePerChange is the core's deltas sent over nodes and
	// changes: 1 when every node gets every change once.
	DeltasPerNodePerChange float64
	// Resyncs is how many snapshots the core sent during the churn:
	// nodes that re-subscribed (0 when every node kept up).
	Resyncs int64
	// Ready is how long every node took to subscribe and hold its
	// snapshot; IdleCPUPerNode the core's CPU per node and second before
	// the churn (heartbeats and their acknowledgements).
	Ready, IdleCPUPerNode  time.Duration
	CoreRSS, CoreHeapInUse int64   // bytes, after the churn
	RSSPerNode             float64 // the core's bytes per node
}

// WriteHollowHeader writes the table's head.
func WriteHollowHeader(w io.Writer) {
	fmt.Fprintln(w, "| nodes | services | all subscribed in | idle core CPU per node | changes | p50 | p99 | max | lost | core CPU per change | node CPU per change | deltas per node per change | snapshots | core RSS | core heap in use | RSS per node |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
}

// WriteRow writes the round's row of the table.
func (r HollowResult) WriteRow(w io.Writer) {
	fmt.Fprintf(w, "| %d | %d | %v | %v/s | %d in %v | %v | %v | %v | %d | %v | %v | %.2f | %d | %d MiB | %d MiB | %.0f KiB |\n", r.Nodes, r.Services,
		r.Ready.Round(100*time.Millisecond), r.IdleCPUPerNode.Round(100*time.Nanosecond), r.Changes, r.Elapsed.Round(time.Second),
		r.P50, r.P99, r.Max, r.Lost, r.CoreCPUPerChange.Round(time.Microsecond), r.NodeCPUPerChange.Round(100*time.Nanosecond), r.DeltasPerNodePerChange, r.Resyncs, r.CoreRSS>>20, r.CoreHeapInUse>>20, r.RSSPerNode/1024)
}

// RunHollow runs a round per node count, writing the table to table as
// the rounds end. A round with changes lost is an error once every round
// has run.
func RunHollow(ctx context.Context, o HollowOptions, table io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	RaiseFDLimit()
	WriteHollowHeader(table)
	var lost []error
	for _, n := range o.Nodes {
		r, err := HollowRound(ctx, o, n)
		if err != nil {
			return fmt.Errorf("hollow round of %d nodes: %w", n, err)
		}
		r.WriteRow(table)
		if r.Lost > 0 {
			lost = append(lost, fmt.Errorf("%d nodes: %d nodes × services did not get their last change", n, r.Lost))
		}
	}
	return errors.Join(lost...)
}

// HollowRound runs one round of n hollow nodes following a core in this
// process.
func HollowRound(ctx context.Context, o HollowOptions, n int) (HollowResult, error) {
	c := NewHollowCluster(uint64(n), n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	views, err := startHollowCores(ctx, max(o.Replicas, 1), o.Heartbeat)
	if err != nil {
		return HollowResult{}, err
	}
	defer views.stop()
	for i := range n {
		views.send(watcher.NodeEvent(watcher.Added, c.Node(i)))
	}
	start := time.Now().Add(-time.Hour) // before the core: no trigger time of the initial state
	for i := range o.Services {
		views.send(watcher.Event{Kind: watcher.KindService, Op: watcher.Added, Object: c.Service(i)})
		views.send(watcher.Event{Kind: watcher.KindEndpointSlice, Op: watcher.Added, Object: c.Slice(i, 0, start)})
	}

	hostsStarted := time.Now()
	var hostEnv []string
	if o.ProfileDir != "" {
		hostEnv = append(hostEnv, envHollowProfile+"="+o.ProfileDir)
	}
	hosts, err := StartHollowHosts(o.Host, n, views.addresses(), o.Progress, hostEnv...)
	if err != nil {
		return HollowResult{}, err
	}
	defer hosts.Stop()
	ready := time.Since(hostsStarted)
	// What the core costs while nothing changes: a window of measure,
	// not a wait for anything.
	idle0 := SelfCPU()
	select {
	case <-ctx.Done():
		return HollowResult{}, ctx.Err()
	case <-time.After(hollowIdleWindow):
	}
	idle := time.Duration(float64(SelfCPU()-idle0) / hollowIdleWindow.Seconds() / float64(n))

	if o.ProfileDir != "" {
		stop, err := startCPUProfile(filepath.Join(o.ProfileDir, fmt.Sprintf("core-%d.cpu.pprof", n)))
		if err != nil {
			return HollowResult{}, err
		}
		defer stop()
	}
	// Churn: Rate endpoint changes/s, each a random service's slice.
	last := map[int]time.Time{}
	versions := make([]int, o.Services)
	deltas0, snapshots0 := views.counts()
	cpu0, hostCPU0 := SelfCPU(), hosts.CPU()
	began := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
	defer tick.Stop()
	changes := int(o.Duration.Seconds() * o.Rate)
	made := NewPhaseProgress(o.Progress, "changes made", changes)
	for k := range changes {
		made.At(k)
		select {
		case <-ctx.Done():
			return HollowResult{}, ctx.Err()
		case <-tick.C:
		}
		i := c.Pick(o.Services)
		if o.Churn == HollowChurnAlike && i%10 == 0 {
			// A service every node sees alike (Cluster policy): the next,
			// or the one before the last.
			if i+1 < o.Services {
				i++
			} else {
				i--
			}
		}
		versions[i]++
		now := time.Now()
		last[i] = now
		views.send(watcher.Event{Kind: watcher.KindEndpointSlice, Op: watcher.Updated, Object: c.Slice(i, versions[i], now)})
	}
	tick.Stop()
	stores, err := hosts.Collect(last)
	if err != nil {
		return HollowResult{}, err
	}
	cpu, hostCPU := SelfCPU()-cpu0, hosts.CPU()-hostCPU0
	deltas, snapshots := views.counts()
	elapsed := time.Since(began)
	st, _ := readProc(os.Getpid()) // no RSS without Linux /proc
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if o.ProfileDir != "" {
		if err := writeHeapProfile(filepath.Join(o.ProfileDir, fmt.Sprintf("core-%d.heap.pprof", n))); err != nil {
			return HollowResult{}, err
		}
	}
	return HollowResult{Nodes: n, Services: o.Services, Changes: changes, Elapsed: elapsed, HollowStores: stores,
		CoreCPUPerChange:       cpu / time.Duration(changes),
		NodeCPUPerChange:       hostCPU / time.Duration(changes) / time.Duration(n),
		DeltasPerNodePerChange: float64(deltas-deltas0) / float64(changes) / float64(n),
		Resyncs:                snapshots - snapshots0, Ready: ready, IdleCPUPerNode: idle,
		CoreRSS: st.RSS, CoreHeapInUse: int64(ms.HeapInuse), RSSPerNode: float64(st.RSS) / float64(n)}, nil
}

// hollowIdleWindow is how long a round measures the core's idle CPU.
const hollowIdleWindow = 5 * time.Second

// startCPUProfile profiles this process's CPU into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return f.Close()
}
