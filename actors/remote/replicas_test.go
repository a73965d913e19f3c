package remote

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// freeAddr is a loopback host:port free when asked.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startReplicas starts a core per views as one protoactor cluster
// (automanaged over the loopback health endpoints health, the first
// len(views) theirs; the rest may join later).
func startReplicas(t *testing.T, ctx context.Context, views []*feedViews, health []string, opts ...func(*CoreConfig)) []*Core {
	t.Helper()
	cores := make([]*Core, len(views))
	var wg sync.WaitGroup
	errs := make([]error, len(views))
	for i := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cores[i], errs[i] = startReplica(ctx, views[i], health[i], health, opts...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return cores
}

func startReplica(ctx context.Context, views *feedViews, health string, peers []string, opts ...func(*CoreConfig)) (*Core, error) {
	p, err := Automanaged(health, peers, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	cfg := CoreConfig{Views: views, MinSyncPeriod: 10 * time.Millisecond, Heartbeat: 500 * time.Millisecond,
		Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop(), Replicas: &Replicas{Name: "test", Provider: p}}
	for _, o := range opts {
		o(&cfg)
	}
	return StartCore(ctx, cfg)
}

// healthAddrs is n free loopback addresses for replicas' health endpoints.
func healthAddrs(t *testing.T, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = freeAddr(t)
	}
	return out
}

// newFeeds is n sources of the same services, one per replica.
func newFeeds(n, services int) []*feedViews {
	views := make([]*feedViews, n)
	for i := range views {
		views[i] = &feedViews{store: watcher.NewStore()}
		for s := range services {
			views[i].store.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{fanoutPort(s, 1)}})
		}
	}
	return views
}

// servedBy is which replica (its index) serves each node, as the replicas
// say; skip leaves some out.
func servedBy(t *testing.T, cores []*Core, skip map[int]bool) map[string]int {
	out := map[string]int{}
	for i, c := range cores {
		if skip[i] {
			continue
		}
		st, err := c.Stats(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.GetSubscriptions() {
			out[s.GetNodeName()] = i
		}
	}
	return out
}

// waitMembers waits until each core counts n replicas.
func waitMembers(t *testing.T, cores []*Core, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range cores {
		if err := c.WaitMembers(ctx, n); err != nil {
			t.Fatalf("%d replicas in each one's topology: %v", n, err)
		}
	}
}

// startBackends subscribes a Source per node through core.
func startBackends(t *testing.T, ctx context.Context, core string, nodes int) []*Source {
	out := make([]*Source, nodes)
	for i := range out {
		src := NewSource(SourceConfig{Core: core, NodeName: fmt.Sprintf("node-%d", i), Heartbeat: 500 * time.Millisecond,
			Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
		if err := src.Start(ctx, func(watcher.Event) {}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(src.Stop)
		out[i] = src
	}
	return out
}

// TestCoreReplicasPlaceAndFailOver: three core replicas on protoactor's
// cluster; backends that know only the first replica's address are each
// sent to the replica placement names for their node, and learn the
// others; the replica serving most of them dies (or stops) during churn:
// each of its backends is served by another within 5 s, and every backend
// ends holding every change.
func TestCoreReplicasPlaceAndFailOver(t *testing.T) {
	if raceEnabled {
		t.Skip("protoactor sets gRPC's global logger as each remoting starts: several in one process race (test/e2e's TestCoreReplicaKilledUnderLoad runs replicas as processes)")
	}
	t.Run("killed", func(t *testing.T) { replicaFailOver(t, true) })
	t.Run("stopped", func(t *testing.T) { replicaFailOver(t, false) })
}

// replicaFailOver runs TestCoreReplicasPlaceAndFailOver with the victim
// killed (its sockets closed, nobody told) or stopped (Core.Stop: it sends
// its backends to the others and leaves the cluster).
func replicaFailOver(t *testing.T, killed bool) {
	const services, nodes = 20, 12
	views := newFeeds(3, services)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cores := startReplicas(t, ctx, views, healthAddrs(t, 3))
	stopped := map[int]bool{}
	defer func() {
		for _, c := range cores {
			c.Stop()
		}
	}()
	// Every replica agrees on three members before backends arrive.
	waitMembers(t, cores, 3)
	backends := startBackends(t, ctx, cores[0].Address(), nodes)
	var by map[string]int
	waitFor(t, 10*time.Second, "every node served by one replica", func() bool { by = servedBy(t, cores, nil); return len(by) == nodes })
	count := map[int]int{}
	for _, i := range by {
		count[i]++
	}
	t.Logf("nodes per replica: %v", count)
	if len(count) < 2 {
		t.Fatalf("placement put every node on one replica: %v", count)
	}
	victim := 1
	for i, n := range count {
		if i != 0 && n > count[victim] {
			victim = i
		}
	}

	// Churn on every replica's source alike (each watches the same
	// cluster), stopping the victim midway.
	version, last := 1, map[int]int{}
	churn := func(k int) {
		version++
		last[k%services] = version
		for i, v := range views {
			if !stopped[i] {
				v.set(k%services, version)
			}
		}
	}
	for k := range 20 {
		churn(k)
	}
	stopAt := time.Now()
	stopped[victim] = true
	if killed {
		kill(cores[victim])
	} else {
		go cores[victim].Stop()
	}
	for k := range 20 {
		churn(k)
	}
	waitFor(t, 5*time.Second, "the victim's nodes served by the others", func() bool {
		by := servedBy(t, cores, stopped)
		for n, i := range by {
			if i == victim {
				delete(by, n)
			}
		}
		return len(by) == nodes
	})
	t.Logf("every node served again %v after the replica died", time.Since(stopAt).Round(time.Millisecond))
	// Every backend holds the last version of every service.
	waitFor(t, 10*time.Second, "every backend holding every change", func() bool {
		for _, b := range backends {
			for svc, v := range last {
				ports, _ := b.Build(fmt.Sprintf("bench/svc-%d", svc))
				if len(ports) != 1 || int(ports[0].GetEndpoints()[0].GetPort()) != v {
					return false
				}
			}
		}
		return true
	})
}

// kill ends a replica as a crash would: its health endpoint and remoting
// close at once, without leaving the cluster or telling anyone.
func kill(c *Core) {
	_ = c.rs.cluster.Config.ClusterProvider.Shutdown(false)
	c.rs.remote.Shutdown(false)
}

// waitFor polls ok, which reads state the test cannot await otherwise
// (the replicas' subscriptions, the backends' stores).
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCoreReplicaJoinTakesItsNodes: a fourth replica joins three serving
// twelve nodes: placement moves some nodes to it, and their backends,
// told by the replicas that served them, subscribe there; the others stay.
func TestCoreReplicaJoinTakesItsNodes(t *testing.T) {
	if raceEnabled {
		t.Skip("protoactor sets gRPC's global logger as each remoting starts: several in one process race")
	}
	const services, nodes = 5, 12
	views := newFeeds(4, services)
	health := healthAddrs(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cores := startReplicas(t, ctx, views[:3], health)
	defer func() {
		for _, c := range cores {
			c.Stop()
		}
	}()
	waitMembers(t, cores, 3)
	startBackends(t, ctx, cores[0].Address(), nodes)
	var before map[string]int
	waitFor(t, 10*time.Second, "every node served", func() bool { before = servedBy(t, cores, nil); return len(before) == nodes })

	joined, err := startReplica(ctx, views[3], health[3], health)
	if err != nil {
		t.Fatal(err)
	}
	cores = append(cores, joined)
	waitMembers(t, cores, 4)
	var after map[string]int
	waitFor(t, 10*time.Second, "some nodes served by the new replica, every node by one", func() bool {
		after = servedBy(t, cores, nil)
		n := 0
		for _, i := range after {
			if i == 3 {
				n++
			}
		}
		return n > 0 && len(after) == nodes
	})
	moved := 0
	for node, i := range after {
		if i != before[node] {
			moved++
			if i != 3 {
				t.Errorf("%s moved from replica %d to %d, not to the one that joined", node, before[node], i)
			}
		}
	}
	t.Logf("%d of %d nodes moved to the replica that joined", moved, nodes)
}
