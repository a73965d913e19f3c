package actors

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/bench/backends"
	"github.com/kproxy/kproxy/messages"
)

// One of three endpoints stalled (its handshakes never complete): without
// outlier detection every connection picked for it waits out a 250 ms dial
// timeout. With it, the endpoint is ejected after a few failures, so the
// service's request rate stays at least 80% of what two healthy endpoints
// give. Both figures come from this run, in interleaved rounds (this
// machine is noisy), compared by median. A round is long against the
// 250 ms a probe of the stalled endpoint costs one client.
func TestStalledEndpointEjectedKeepsThroughput(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	healthy := tcpBackends(t, 2)
	stalled := blackhole(t)
	two := svcPort("two", messages.Protocol_TCP, "127.0.20.20", 18080)
	three := svcPort("three", messages.Protocol_TCP, "127.0.20.21", 18080)
	p.Submit(snapshot(1, spe(two, endpoints(healthy...)), spe(three, endpoints(append(slices.Clone(healthy), stalled)...))))
	w.listening(t, two.GetKey().ID(), 2, 1)
	w.listening(t, three.GetKey().ID(), 2, 1)

	const rounds, requests, clients = 3, 2000, 4
	var rateTwo, rateThree []float64
	for r := range rounds {
		for _, svc := range []struct {
			addr  string
			rates *[]float64
		}{{"127.0.20.20:18080", &rateTwo}, {"127.0.20.21:18080", &rateThree}} {
			rate, failed := requestRate(svc.addr, requests, clients)
			if failed > 0 {
				t.Fatalf("round %d, %s: %d of %d requests failed", r, svc.addr, failed, requests)
			}
			*svc.rates = append(*svc.rates, rate)
		}
	}
	two50, three50 := median(rateTwo), median(rateThree)
	t.Logf("requests/s, two healthy endpoints: %.0f %v; one of three stalled: %.0f %v; ratio %.2f",
		two50, rateTwo, three50, rateThree, three50/two50)
	if three50 < 0.8*two50 {
		t.Errorf("with one of three endpoints stalled: %.0f requests/s, below 80%% of %.0f with two healthy ones", three50, two50)
	}
	w.wait(t, "the stalled endpoint shown as ejected", func(m map[string]*messages.ServicePortState) bool {
		ej := m[three.GetKey().ID()].GetEjected()
		return len(ej) == 1 && ej[0].GetEndpoint() == stalled && ej[0].GetEjections() >= 1
	})
}

// requestRate makes n connection-per-request round trips to addr from c
// concurrent clients and returns requests per second and failures.
func requestRate(addr string, n, c int) (float64, int) {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if roundTrip(addr) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), int(failed.Load())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// An ejected endpoint that comes back is restored by kproxy's own probe
// when its ejection is up; a client never has to fail on it first.
func TestEjectedEndpointRestoredByProbe(t *testing.T) {
	p := Start(Config{BindAddress: "127.0.0.1", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(testLogLevel),
		Outliers: balancer.OutlierConfig{ConsecutiveFailures: 2, BaseEjection: 200 * time.Millisecond, MaxEjection: time.Second}})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	healthy := tcpBackends(t, 1)
	// A dead endpoint: a port nobody listens on, refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	sp := svcPort("comeback", messages.Protocol_TCP, "127.0.20.22", 18080)
	p.Submit(snapshot(1, spe(sp, endpoints(healthy[0], dead))))
	w.listening(t, sp.GetKey().ID(), 2, 1)

	for i := range 10 {
		if got := dialName(t, "127.0.20.22:18080"); got != "backend-0" {
			t.Fatalf("request %d reached %s", i, got)
		}
	}
	w.wait(t, "the dead endpoint ejected", func(m map[string]*messages.ServicePortState) bool {
		ej := m[sp.GetKey().ID()].GetEjected()
		return len(ej) == 1 && ej[0].GetEndpoint() == dead
	})

	// It comes back; probes find it (the first ones fail and back off).
	back, err := backends.StartTCP("comeback", dead)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", dead, err)
	}
	t.Cleanup(back.Close)
	w.wait(t, "the endpoint restored", func(m map[string]*messages.ServicePortState) bool {
		return len(m[sp.GetKey().ID()].GetEjected()) == 0
	})
	seen := map[string]bool{}
	for range 4 {
		seen[dialName(t, "127.0.20.22:18080")] = true
	}
	if !seen["comeback"] {
		t.Fatalf("after restoring, connections reached only %v", seen)
	}
}
