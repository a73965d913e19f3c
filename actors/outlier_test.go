package actors

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
)

// One of three endpoints stalled (its handshakes never complete): without
// outlier detection every connection picked for it waits out a 250 ms dial
// timeout. With it, the endpoint is ejected after a few failures, so the
// service's request rate stays at least 80% of what two healthy endpoints
// give. Both figures come from this run: each round loads both services
// at once (this machine is noisy), and the median of the rounds' ratios
// counts. The first round includes the detection.
func TestStalledEndpointEjectedKeepsThroughput(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	healthy := tcpBackends(t, 2)
	stalled := blackhole(t)
	two := svcPort("two", messages.Protocol_TCP, "127.0.20.20", 18080)
	three := svcPort("three", messages.Protocol_TCP, "127.0.20.21", 18080)
	p.Submit(snapshot(1, spe(two, endpoints(healthy...)), spe(three, endpoints(append(slices.Clone(healthy), stalled)...))))
	w.listening(t, two.GetKey().ID(), 1, 1)
	w.listening(t, three.GetKey().ID(), 1, 1)

	const rounds, requests, clients = 3, 2000, 4
	var rateTwo, rateThree, ratios []float64
	for r := range rounds {
		// Both services at once, so the machine's noise hits both alike.
		var two, three float64
		var failedTwo, failedThree int
		var errTwo, errThree error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			two, failedTwo, errTwo = requestRate("127.0.20.20:18080", requests, clients)
		}()
		three, failedThree, errThree = requestRate("127.0.20.21:18080", requests, clients)
		wg.Wait()
		if failedTwo+failedThree > 0 {
			t.Fatalf("round %d: %d and %d of %d requests failed (first errors: %v; %v)", r, failedTwo, failedThree, requests, errTwo, errThree)
		}
		rateTwo, rateThree, ratios = append(rateTwo, two), append(rateThree, three), append(ratios, three/two)
	}
	ratio := median(ratios)
	t.Logf("requests/s, two healthy endpoints: %.0f; one of three stalled: %.0f; ratios %.2f, median %.2f",
		rateTwo, rateThree, ratios, ratio)
	if ratio < 0.8 {
		t.Errorf("with one of three endpoints stalled, requests/s is %.2f of the two-healthy-endpoint figure, below 0.8", ratio)
	}
	w.wait(t, "the stalled endpoint shown as ejected", func(m map[string]*messages.ServicePortState) bool {
		ej := m[three.GetKey().ID()].GetEjected()
		return len(ej) == 1 && ej[0].GetEndpoint() == stalled && ej[0].GetEjections() >= 1
	})
}

// requestRate makes n connection-per-request round trips to addr from c
// concurrent clients and returns requests per second, failures and the
// first failure's error.
func requestRate(addr string, n, c int) (float64, int, error) {
	var next, failed atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := roundTrip(addr); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	var err error
	if e := first.Load(); e != nil {
		err = *e
	}
	return float64(n) / time.Since(start).Seconds(), int(failed.Load()), err
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
	w.listening(t, sp.GetKey().ID(), 1, 1)

	for i := range 10 {
		if got := dialName(t, "127.0.20.22:18080"); got != "backend-0" {
			t.Fatalf("request %d reached %s", i, got)
		}
	}
	w.wait(t, "the dead endpoint ejected, with why", func(m map[string]*messages.ServicePortState) bool {
		ej := m[sp.GetKey().ID()].GetEjected()
		return len(ej) == 1 && ej[0].GetEndpoint() == dead && strings.Contains(ej[0].GetLastError(), "connection refused")
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
