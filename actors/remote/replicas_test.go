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

// startReplicas starts n cores as one protoactor cluster (automanaged
// over loopback health endpoints), each watching its own views.
func startReplicas(t *testing.T, ctx context.Context, views []*feedViews) []*Core {
	t.Helper()
	health := make([]string, len(views))
	for i := range health {
		health[i] = freeAddr(t)
	}
	cores := make([]*Core, len(views))
	var wg sync.WaitGroup
	errs := make([]error, len(views))
	for i := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := Automanaged(health[i], health, 100*time.Millisecond)
			if err != nil {
				errs[i] = err
				return
			}
			cores[i], errs[i] = StartCore(ctx, CoreConfig{Views: views[i], MinSyncPeriod: 10 * time.Millisecond, Heartbeat: 500 * time.Millisecond,
				Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop(), Replicas: &Replicas{Name: "test", Provider: p}})
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

// TestCoreReplicasPlaceAndFailOver: three core replicas on protoactor's
// cluster; backends that know only the first replica's address are each
// sent to the replica placement names for their node, and learn the
// others; the replica serving most of them dies during churn: each of
// its backends is served by another within 5 s, and every backend ends
// holding every change.
func TestCoreReplicasPlaceAndFailOver(t *testing.T) {
	if raceEnabled {
		t.Skip("protoactor sets gRPC's global logger as each remoting starts: several in one process race (cmd/kproxy's TestCoreReplicaKilledUnderLoad runs replicas as processes)")
	}
	const services, nodes = 20, 12
	views := make([]*feedViews, 3)
	for i := range views {
		views[i] = &feedViews{store: watcher.NewStore()}
		for s := range services {
			views[i].store.Apply([]*messages.ServicePortEndpoints{fanoutPort(s, 1)}, nil)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cores := startReplicas(t, ctx, views)
	stopped := map[int]bool{}
	defer func() {
		for _, c := range cores {
			c.Stop()
		}
	}()
	// Every replica agrees on three members before backends arrive.
	waitFor(t, 10*time.Second, "three replicas in each one's topology", func() bool {
		for _, c := range cores {
			if t := c.members.Load(); t == nil || len(t.members) != 3 {
				return false
			}
		}
		return true
	})

	backends := make([]*Source, nodes)
	for i := range backends {
		src := NewSource(SourceConfig{Core: cores[0].Address(), NodeName: fmt.Sprintf("node-%d", i), Heartbeat: 500 * time.Millisecond,
			Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
		if err := src.Start(ctx, func(watcher.Event) {}); err != nil {
			t.Fatal(err)
		}
		defer src.Stop()
		backends[i] = src
	}
	// Who serves whom, from the replicas themselves.
	servedBy := func() map[string]int {
		out := map[string]int{}
		for i, c := range cores {
			if stopped[i] {
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
	var by map[string]int
	waitFor(t, 10*time.Second, "every node served by one replica", func() bool { by = servedBy(); return len(by) == nodes })
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
	kill(cores[victim])
	for k := range 20 {
		churn(k)
	}
	waitFor(t, 5*time.Second, "the victim's nodes served by the others", func() bool {
		by := servedBy()
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
