package remote

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// feedViews is every node's view of one Store that the test changes,
// notifying the core as a source would.
type feedViews struct {
	store  *watcher.Store
	mu     sync.Mutex
	notify func(watcher.Event)
}

func (f *feedViews) Start(_ context.Context, notify func(watcher.Event)) error {
	f.mu.Lock()
	f.notify = notify
	f.mu.Unlock()
	return nil
}
func (f *feedViews) Stop() {}

// Every node sees the fan-out's services alike (watcher.Classifier).
func (f *feedViews) ServiceNames() []string         { return f.store.ServiceNames() }
func (f *feedViews) Classes(string) watcher.Classes { return watcher.Classes{} }
func (f *feedViews) Zone(string) string             { return "" }
func (f *feedViews) ViewFor(string) watcher.View    { return f.store }

func (f *feedViews) set(svc, version int) {
	changed, _ := f.store.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{fanoutPort(svc, version)}}) // no updates: no error
	for _, s := range changed {
		f.mu.Lock()
		f.notify(watcher.Event{Kind: watcher.KindRemote, Service: s})
		f.mu.Unlock()
	}
}

// fanoutPort is service svc at version (the endpoint's port).
func fanoutPort(svc, version int) *messages.ServicePortEndpoints {
	return &messages.ServicePortEndpoints{ServicePort: &messages.ServicePort{Key: &messages.ServicePortKey{Namespace: "bench",
		Name: "svc-" + strconv.Itoa(svc), PortName: "p", Protocol: messages.Protocol_TCP}, Port: 80,
		ClusterIps: &messages.IPSet{V4: []string{fmt.Sprintf("10.96.%d.%d", svc/250, svc%250+1)}}},
		Endpoints: []*messages.Endpoint{{Ips: []string{"10.1.0.1"}, Port: int32(version), Ready: true, Internal: true, External: true}}}
}

// TestCoreFanout measures what one core delivers to N backends, each a
// Source with its own remoting (its own listener and connection)
// in this process, over loopback: changes to S services made at a paced
// rate, then as fast as they can be made; a change's delivery latency runs
// from the change made at the source to the backend's Store holding it (or
// a later version). Only with KPROXY_FANOUT=1 and without -race (protoactor
// sets gRPC's global logger whenever remoting starts, a race between
// remotings started in one process):
//
//	KPROXY_FANOUT=1 go test -run TestCoreFanout -v -timeout 20m ./actors/remote/
func TestCoreFanout(t *testing.T) {
	if os.Getenv("KPROXY_FANOUT") != "1" {
		t.Skip("set KPROXY_FANOUT=1 to measure the core's fan-out")
	}
	if raceEnabled {
		t.Skip("fan-out runs many remotings in one process: run it without -race")
	}
	ns := []int{1, 10, 50}
	if v := os.Getenv("KPROXY_FANOUT_N"); v != "" {
		ns = nil
		for _, f := range splitComma(v) {
			n, _ := strconv.Atoi(f)
			ns = append(ns, n)
		}
	}
	const services = 1000
	t.Logf("| backends | mode | changes made/s | changes delivered/s (to every backend) | p50 | p99 | max | deliveries |")
	t.Logf("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range ns {
		fanoutRound(t, n, services)
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

type fanoutBackend struct {
	src  *Source
	mu   sync.Mutex
	seen map[string]int // service -> version applied
	lat  []time.Duration
	cond *sync.Cond
}

func fanoutRound(t *testing.T, n, services int) {
	views := &feedViews{store: watcher.NewStore()}
	for s := range services {
		views.store.Apply(&messages.Delta{Upserts: []*messages.ServicePortEndpoints{fanoutPort(s, 0)}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	core, err := StartCore(ctx, CoreConfig{Views: views, MinSyncPeriod: 10 * time.Millisecond, MaxInFlight: 1000,
		Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Stop()

	// made[svc] holds when each version of svc was made.
	var madeMu sync.Mutex
	made := make([][]time.Time, services)
	backends := make([]*fanoutBackend, n)
	for i := range backends {
		b := &fanoutBackend{seen: map[string]int{}}
		b.cond = sync.NewCond(&b.mu)
		b.src = NewSource(SourceConfig{Core: core.Address(), NodeName: fmt.Sprintf("node-%d", i),
			Remote: Config{Listen: "127.0.0.1:0"}, Log: zerolog.Nop()})
		notify := func(e watcher.Event) {
			ports, _ := b.src.Build(e.Service)
			if len(ports) != 1 {
				return
			}
			v := int(ports[0].GetEndpoints()[0].GetPort())
			svc, _ := strconv.Atoi(ports[0].GetServicePort().GetKey().GetName()[len("svc-"):])
			now := time.Now()
			madeMu.Lock()
			times := made[svc]
			madeMu.Unlock()
			b.mu.Lock()
			for w := b.seen[e.Service] + 1; w <= v && w <= len(times); w++ {
				b.lat = append(b.lat, now.Sub(times[w-1]))
			}
			if v > b.seen[e.Service] {
				b.seen[e.Service] = v
			}
			b.mu.Unlock()
			b.cond.Broadcast()
		}
		if err := b.src.Start(ctx, notify); err != nil {
			t.Fatal(err)
		}
		defer b.src.Stop()
		backends[i] = b
	}

	versions := make([]int, services)
	change := func(k int) {
		svc := k % services
		versions[svc]++
		madeMu.Lock()
		made[svc] = append(made[svc], time.Now())
		madeMu.Unlock()
		views.set(svc, versions[svc])
	}
	// waitAll waits until every backend holds every service's last version.
	waitAll := func() {
		for _, b := range backends {
			b.mu.Lock()
			deadline := time.AfterFunc(2*time.Minute, b.cond.Broadcast)
			start := time.Now()
			for {
				done := true
				for s := range services {
					if b.seen["bench/svc-"+strconv.Itoa(s)] < versions[s] {
						done = false
						break
					}
				}
				if done || time.Since(start) > 2*time.Minute {
					break
				}
				b.cond.Wait()
			}
			deadline.Stop()
			b.mu.Unlock()
		}
	}
	collect := func() []time.Duration {
		var all []time.Duration
		for _, b := range backends {
			b.mu.Lock()
			all = append(all, b.lat...)
			b.lat = nil
			b.mu.Unlock()
		}
		slices.Sort(all)
		return all
	}
	report := func(mode string, changes int, madeFor, deliveredIn time.Duration) {
		all := collect()
		if len(all) == 0 {
			t.Fatalf("%d backends, %s: nothing delivered", n, mode)
		}
		pct := func(p float64) time.Duration { return all[min(len(all)-1, int(float64(len(all))*p))] }
		want := changes * n
		t.Logf("| %d | %s | %.0f | %.0f | %v | %v | %v | %d of %d |", n, mode, float64(changes)/madeFor.Seconds(),
			float64(changes)/deliveredIn.Seconds(), pct(0.5).Round(time.Microsecond*100), pct(0.99).Round(time.Microsecond*100),
			all[len(all)-1].Round(time.Microsecond*100), len(all), want)
		if len(all) != want {
			t.Errorf("%d backends, %s: %d deliveries, want %d", n, mode, len(all), want)
		}
	}

	// Paced: 500 changes/s for 4 s.
	const rate, paced = 500, 2000
	start := time.Now()
	tick := time.NewTicker(time.Second / rate)
	for k := range paced {
		<-tick.C
		change(k)
	}
	tick.Stop()
	madeFor := time.Since(start)
	waitAll()
	report("paced 500/s", paced, madeFor, time.Since(start))

	// As fast as the source can make them: 20,000 changes.
	const burst = 20000
	start = time.Now()
	for k := range burst {
		change(k)
	}
	madeFor = time.Since(start)
	waitAll()
	report("burst", burst, madeFor, time.Since(start))
}
