package main

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestKubeNetworkProgrammingFromStartOnly: as kube-proxy, kproxy observes
// kubeproxy_network_programming_duration_seconds only for changes
// triggered after it started watching: the initial list carries every
// slice's last trigger time, which may be long past, and observing those
// would fill the histogram with the age of the cluster's objects instead
// of programming latencies (a real API server).
func TestKubeNetworkProgrammingFromStartOnly(t *testing.T) {
	s, k, _, ip1, ip2 := startWeb(t)
	old := k.slice("web", "web-a", 8080, readyEP(ip1.String()))
	old.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Add(-time.Minute).Format(time.RFC3339Nano)}
	k.apply(old)

	metricsAddr := freeAddr(t)
	in := startKubeKproxy(t, s, func(o *runOptions) { o.metricsBindAddress = metricsAddr })
	in.endpointsAre(t, "default/web:tcp/TCP", netip.AddrPortFrom(ip1, 8080).String())
	const name = "kubeproxy_network_programming_duration_seconds"
	if count, sum := histogram(t, scrape(t, metricsAddr), name); count != 0 {
		t.Fatalf("%s has %d observations (%.1f s) from the initial list: a trigger from before kproxy started", name, count, sum)
	}

	sl := k.slice("web", "web-a", 8080, readyEP(ip2.String()))
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	k.apply(sl)
	in.endpointsAre(t, "default/web:tcp/TCP", netip.AddrPortFrom(ip2, 8080).String())
	// The change is observed as it is handed on, which the state may show
	// first: scraped until it is there (or a second one would be).
	var count uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		if count, _ = histogram(t, scrape(t, metricsAddr), name); count != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a metric: no event to await
	}
	if count != 1 {
		t.Fatalf("%s has %d observations after one change, want 1", name, count)
	}
}
