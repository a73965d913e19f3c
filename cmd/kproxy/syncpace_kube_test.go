package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// TestKubeIdleChangeAppliedAtOnce: --min-sync-period bounds how often
// changes are applied under load, it is not a delay: with it an hour long,
// an EndpointSlice change made while kproxy is idle is applied at once (a
// real API server, real connections through the service's cluster IP).
func TestKubeIdleChangeAppliedAtOnce(t *testing.T) {
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	ip0, ip1 := bn.AddIP(t), bn.AddIP(t)
	kubeBackends(t, bn, 8080, ip0, ip1)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	web := k.service("web", 18080, intstr.FromInt32(8080), nil)
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip0.String())))

	in := startKubeKproxy(t, s, func(o *runOptions) { o.minSyncPeriod = time.Hour })
	const id = "default/web:tcp/TCP"
	webAddr := web.Spec.ClusterIP + ":18080"
	in.endpointsAre(t, id, netip.AddrPortFrom(ip0, 8080).String())

	// Two changes one after the other, each awaited: both within the
	// burst, neither waits for the hour.
	for _, ip := range []netip.Addr{ip1, ip0} {
		k.apply(k.slice("web", "web-a", 8080, readyEP(ip.String())))
		want := netip.AddrPortFrom(ip, 8080).String()
		in.endpointsAre(t, id, want)
		if got := readName(t, webAddr); got != want {
			t.Fatalf("after the change to %s, web reached %s", want, got)
		}
	}
}

// TestKubeEndpointChangesNotPaced: --min-sync-period paces what programs
// kernel rules or opens listeners, as kube-proxy's minSyncPeriod does;
// a change of only a service's endpoints programs neither, so it is not
// paced. With the period 10 s long and another service's endpoints
// changing many times a second (which spent the burst on a paced build),
// an endpoint change of web reaches its new endpoint well within the
// period; new services still take a token each, the third one waiting
// for the period (a real API server, real connections).
func TestKubeEndpointChangesNotPaced(t *testing.T) {
	const period = 10 * time.Second
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	ip0, ip1 := bn.AddIP(t), bn.AddIP(t)
	kubeBackends(t, bn, 8080, ip0, ip1)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	web := k.service("web", 18080, intstr.FromInt32(8080), nil)
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip0.String())))
	k.service("busy", 18081, intstr.FromInt32(8080), nil)
	k.apply(k.slice("busy", "busy-a", 8080, readyEP(ip0.String())))

	in := startKubeKproxy(t, s, func(o *runOptions) { o.minSyncPeriod = period })
	const webID, busyID = "default/web:tcp/TCP", "default/busy:tcp/TCP"
	in.endpointsAre(t, webID, netip.AddrPortFrom(ip0, 8080).String())
	in.endpointsAre(t, busyID, netip.AddrPortFrom(ip0, 8080).String())

	// busy's endpoint flips between the two addresses, 50 times a
	// second, bounded in count and time.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var made atomic.Int64
	var last atomic.Value
	churned := make(chan error, 1)
	go func() {
		churned <- func() error {
			api := s.Admin.DiscoveryV1().EndpointSlices("default")
			cur, err := api.Get(ctx, "busy-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 1; i <= 3000; i++ {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				ip := []netip.Addr{ip0, ip1}[i%2]
				cur.Endpoints[0].Addresses = []string{ip.String()}
				if cur, err = api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("update busy-a: %w", err)
				}
				last.Store(netip.AddrPortFrom(ip, 8080).String())
				made.Add(1)
			}
			return nil
		}()
	}()
	stopChurn := func() {
		cancel()
		if err := <-churned; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { cancel() })
	deadline := time.Now().Add(30 * time.Second)
	for made.Load() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the churn made %d changes in 30 s", made.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling a counter
	}

	start := time.Now()
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip1.String())))
	want := netip.AddrPortFrom(ip1, 8080).String()
	in.endpointsAre(t, webID, want)
	if got := readName(t, web.Spec.ClusterIP+":18080"); got != want {
		t.Fatalf("after the change to %s, web reached %s", want, got)
	}
	if took := time.Since(start); took > period/4 {
		t.Fatalf("web's endpoint change, made while busy's endpoints changed %d times, took %v to reach the new endpoint: paced as if it needed rules (--min-sync-period %v)",
			made.Load(), took.Round(time.Millisecond), period)
	}
	stopChurn()
	start = time.Now()
	in.endpointsAre(t, busyID, last.Load().(string))
	if took := time.Since(start); took > period/4 {
		t.Fatalf("busy's last endpoint change (of %d) took %v after the churn stopped", made.Load(), took.Round(time.Millisecond))
	}
	t.Logf("under %d endpoint changes of busy, web's endpoint change applied within %v", made.Load(), period/4)

	// New services need rules and listeners: the burst of two goes at
	// once, the third waits for a token.
	var took time.Duration
	for i := range 3 {
		name := fmt.Sprintf("new-%d", i)
		start := time.Now()
		k.service(name, 18090, intstr.FromInt32(8080), nil)
		k.apply(k.slice(name, name+"-a", 8080, readyEP(ip0.String())))
		in.waitListening(t, "default/"+name+":tcp/TCP", 1)
		took = time.Since(start)
	}
	if took < period/2 {
		t.Fatalf("the third new service in a row was applied after %v: not paced by --min-sync-period %v", took.Round(time.Millisecond), period)
	}
	t.Logf("the third new service in a row was applied after %v", took.Round(time.Millisecond))
}
