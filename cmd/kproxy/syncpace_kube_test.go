package main

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/watcher/kubetest"
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
