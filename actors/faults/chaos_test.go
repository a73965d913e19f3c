package faults_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/actortest"
)

// Chaos at 20 crashes/s across 200 ports for 10 s with concurrent clients:
// no connection fails, and goroutines and fds return to their baseline.
func TestChaosNoFailuresNoLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s chaos run")
	}
	tr := startTree(t, actors.Config{}, zerolog.WarnLevel)
	addrs := tcpBackends(t, 3)
	const n = 200
	var spes []*messages.ServicePortEndpoints
	var svcAddrs []string
	for i := range n {
		ip := fmt.Sprintf("127.0.%d.%d", 25+i/200, 1+i%200)
		spes = append(spes, spe(svcPort(fmt.Sprintf("c%03d", i), ip, 18080), addrs))
		svcAddrs = append(svcAddrs, ip+":18080")
	}
	tr.submit(spes...)
	tr.w.Wait(t, "200 service ports listening", func(m map[string]*messages.ServicePortState) bool {
		ready := 0
		for _, st := range m {
			if len(st.GetListenAddresses()) == 1 {
				ready++
			}
		}
		return ready == n
	})
	for _, a := range svcAddrs[:10] {
		if err := actortest.RoundTrip(a); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	baseGoroutines, baseFDs := runtime.NumGoroutine(), actortest.OpenFDs(t)

	stop := make(chan struct{})
	h := actortest.StartHammer(svcAddrs, 8, stop)
	crashes, err := tr.inj.Chaos(context.Background(), 20, 10*time.Second, 42)
	close(stop)
	h.WG.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(crashes) < 150 {
		t.Fatalf("chaos made only %d crashes in 10 s at 20/s", len(crashes))
	}
	for addr, errs := range h.Failures {
		t.Errorf("%s: %d failed connections, first: %v", addr, len(errs), errs[0])
	}
	if h.OK.Load() < 1000 {
		t.Fatalf("only %d connections succeeded", h.OK.Load())
	}
	// Every port still works after the storm.
	for _, a := range svcAddrs {
		if err := actortest.RoundTrip(a); err != nil {
			t.Fatalf("%s after chaos: %v", a, err)
		}
	}
	g, fds := actortest.WaitBaseline(t, baseGoroutines, baseFDs, "chaos")
	t.Logf("%d crashes, %d connections ok; goroutines %d (baseline %d), fds %d (baseline %d)",
		len(crashes), h.OK.Load(), g, baseGoroutines, fds, baseFDs)
	if got := tr.inj.Counts(); got.FaultsInjected != int64(len(crashes)) || got.Restarts < int64(len(crashes)) {
		t.Fatalf("counts %+v, want %d faults and as many restarts", got, len(crashes))
	}
}

// A storm over every actor kind of a bind-mode tree (the Rules actor
// exists only in kernel modes), under load: nothing fails.
func TestStormOfEveryKindLosesNothing(t *testing.T) {
	tr := startTree(t, actors.Config{}, zerolog.ErrorLevel)
	addrs := tcpBackends(t, 2)
	var spes []*messages.ServicePortEndpoints
	var targets []string
	for i := range 10 {
		sp := svcPort(fmt.Sprintf("storm-%d", i), fmt.Sprintf("127.0.22.%d", i+1), 18080)
		sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
		spes = append(spes, spe(sp, addrs))
		targets = append(targets, fmt.Sprintf("127.0.22.%d:18080", i+1))
	}
	tr.submit(spes...)
	for _, s := range spes {
		tr.w.listening(t, s.GetServicePort().GetKey().ID())
	}
	stop := make(chan struct{})
	h := actortest.StartHammer(targets, 4, stop)
	kinds := []string{"portal", "balancer", "affinity", "serviceport", "watcher", "proxier"}
	crashes, err := tr.inj.Storm(context.Background(), 20, 2*time.Second, 7, kinds)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.inj.Storm(context.Background(), 20, time.Second, 7, []string{"rules"}); err == nil {
		t.Error("a rules storm in bind mode was accepted")
	}
	tr.w.Wait(t, "every service port listening", func(m map[string]*messages.ServicePortState) bool {
		for _, s := range spes {
			if len(m[s.GetServicePort().GetKey().ID()].GetListenAddresses()) != 1 {
				return false
			}
		}
		return true
	})
	close(stop)
	h.WG.Wait()
	failed, first := h.Failed()
	byKind := map[string]int{}
	for _, c := range crashes {
		byKind[c.Actor]++
	}
	t.Logf("storm: %v; %d requests served, %d failed", byKind, h.OK.Load(), failed)
	if len(byKind) < 4 {
		t.Errorf("the storm hit only %v", byKind)
	}
	if failed > 0 {
		t.Errorf("%d requests failed in the storm (first: %v)", failed, first)
	}
}
