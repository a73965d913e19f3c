package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/kubetest"
)

// The API server goes away for several seconds while traffic flows:
// traffic keeps flowing, and changes made after it returns are applied
// without restarting kproxy.
func TestKubeAPIServerOutage(t *testing.T) {
	s, k, web, ip1, ip2 := startWeb(t)
	in := startKubeKproxy(t, s, nil)
	in.endpointsAre(t, "default/web:tcp/TCP", netip.AddrPortFrom(ip1, 8080).String())
	webAddr := web.Spec.ClusterIP + ":18080"

	// Clients run through the whole outage.
	l := startLoad(webAddr)

	stopping := time.Now()
	s.Stop(t)
	down := time.Now()
	t.Logf("API server stopped in %v", down.Sub(stopping).Round(time.Millisecond))
	okBefore := l.ok.Load()
	time.Sleep(5 * time.Second) // the outage itself is what is tested
	if l.ok.Load() == okBefore {
		t.Fatal("no connection succeeded while the API server was down")
	}
	s.Restart(t)
	back := time.Now()
	t.Logf("API server was down %v", back.Sub(down).Round(time.Millisecond))

	// Changes made after it returns are applied: a new endpoint and a new service.
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip1.String()), readyEP(ip2.String())))
	api := k.service("api", 18081, intstr.FromInt32(8080), nil)
	k.apply(k.slice("api", "api-a", 8080, readyEP(ip2.String())))
	in.endpointsAre(t, "default/web:tcp/TCP", netip.AddrPortFrom(ip1, 8080).String(), netip.AddrPortFrom(ip2, 8080).String())
	in.endpointsAre(t, "default/api:tcp/TCP", netip.AddrPortFrom(ip2, 8080).String())
	t.Logf("changes made after the API server returned were applied %v later", time.Since(back).Round(time.Millisecond))
	if got := readName(t, api.Spec.ClusterIP+":18081"); got != netip.AddrPortFrom(ip2, 8080).String() {
		t.Fatalf("new service reached %s", got)
	}
	l.stopAndCheck(t, "across the outage")
	// The changes can be applied before the probe that logs the return.
	in.waitLogged(t, 0, "API server unreachable")
	in.waitLogged(t, 0, "API server reachable again")
}

// load is two clients dialing a service in a loop, each connection
// reading the backend's name.
type load struct {
	stop       chan struct{}
	wg         sync.WaitGroup
	ok, failed atomic.Int64
	firstErr   atomic.Value
}

func startLoad(addr string) *load {
	l := &load{stop: make(chan struct{})}
	for range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				if _, err := tryReadName(addr); err != nil {
					l.failed.Add(1)
					l.firstErr.CompareAndSwap(nil, err)
				} else {
					l.ok.Add(1)
				}
				time.Sleep(5 * time.Millisecond) // pace the load; not synchronisation
			}
		}()
	}
	return l
}

// stopAndCheck stops the clients and fails the test if any connection failed.
func (l *load) stopAndCheck(t *testing.T, during string) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.failed.Load() != 0 {
		t.Fatalf("%d of %d connections failed %s; first: %v", l.failed.Load(), l.ok.Load()+l.failed.Load(), during, l.firstErr.Load())
	}
	if l.ok.Load() == 0 {
		t.Fatal("the clients made no connection")
	}
	t.Logf("%d connections %s, none failed", l.ok.Load(), during)
}

// The API server's connections break under the informers five times
// (kproxy chaos apiserver break), with traffic flowing: no connection
// fails, and a change made after each break is applied (client-go
// re-lists and re-watches by itself).
func TestKubeWatchBreak(t *testing.T) {
	s, k, web, ip1, ip2 := startWeb(t)
	admin := freeAddr(t)
	in := startKubeKproxy(t, s, func(o *runOptions) { o.enableFaultInjection, o.adminAddress = true, admin })
	e1, e2 := netip.AddrPortFrom(ip1, 8080).String(), netip.AddrPortFrom(ip2, 8080).String()
	in.endpointsAre(t, "default/web:tcp/TCP", e1)
	l := startLoad(web.Spec.ClusterIP + ":18080")

	var applied []time.Duration
	for i := range 5 {
		var out bytes.Buffer
		if err := chaosCommand([]string{"--admin-address", admin, "apiserver", "break"}, &out); err != nil {
			t.Fatalf("kproxy chaos apiserver break: %v: %s", err, out.String())
		}
		var res struct{ ConnectionsClosed int }
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.ConnectionsClosed == 0 {
			t.Fatalf("break %d: closed no connection to the API server: %s %v", i, out.String(), err)
		}
		broke := time.Now()
		want := []string{e1}
		eps := []ep{readyEP(ip1.String())}
		if i%2 == 0 {
			want, eps = []string{e1, e2}, append(eps, readyEP(ip2.String()))
		}
		k.apply(k.slice("web", "web-a", 8080, eps...))
		in.endpointsAre(t, "default/web:tcp/TCP", want...)
		applied = append(applied, time.Since(broke))
	}
	t.Logf("a change made just after each of 5 breaks applied after %v", applied)
	l.stopAndCheck(t, "across 5 broken API server connections")
}

// 2,000 services with 5 endpoints each created in a burst are all
// forwarding. Reports the time from the last create to the last service
// programmed, and the Watcher's updates against informer events.
func TestKubeTwoThousandServices(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 services")
	}
	const n, perService = 2000, 5
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	var ips []netip.Addr
	for range perService {
		ips = append(ips, bn.AddIP(t))
	}
	kubeBackends(t, bn, 8080, ips...)
	// The default coalescing window, as a user runs it.
	in := startKubeKproxy(t, s, func(o *runOptions) { o.minSyncPeriod = actors.DefaultMinSyncPeriod })
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}

	var eps []ep
	for _, ip := range ips {
		eps = append(eps, readyEP(ip.String()))
	}
	// Create in a burst from 8 clients.
	work := make(chan int)
	var wg sync.WaitGroup
	clusterIPs := make([]string, n)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("svc-%04d", i)
				clusterIPs[i] = k.service(name, 18080, intstr.FromInt32(8080), nil).Spec.ClusterIP
				k.apply(k.slice(name, name+"-a", 8080, eps...))
			}
		}()
	}
	start := time.Now()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	lastCreate := time.Now()
	in.waitFor(t, fmt.Sprintf("%d services programmed", n), func(m map[string]*messages.ServicePortState) bool {
		ready := 0
		for id, st := range m {
			if id != "default/kubernetes:https/TCP" && len(st.GetListenAddresses()) == 1 && len(st.GetEndpoints()) == perService {
				ready++
			}
		}
		return ready == n
	})
	programmed := time.Now()

	// Every service forwards.
	var failures atomic.Int64
	work = make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := tryReadName(clusterIPs[i] + ":18080"); err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of %d services did not forward", failures.Load(), n)
	}
	stats, err := in.proxy.WatcherStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services x %d endpoints: created in %v; last create -> last programmed %v; informer events %d, Watcher changes sent %d (%.1f events per change), flushes %d",
		n, perService, lastCreate.Sub(start).Round(time.Millisecond), programmed.Sub(lastCreate).Round(time.Millisecond),
		stats.GetEvents(), stats.GetChanges(), float64(stats.GetEvents())/float64(max(stats.GetChanges(), 1)), stats.GetFlushes())
}
