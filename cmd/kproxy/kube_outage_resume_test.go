package main

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// outageLongEnoughForBackoff is an API server outage after which
// client-go's reflector backoff (0.8 s doubling to a 30 s cap, each delay
// stretched by up to 100% at random; both the list-and-watch loop and the
// watch retry step it) has its next retry scheduled well after the return:
// after about 12 s of failures the delays are 12.8 s or more. Without the
// APIGate, a change made right after a 20 s outage was applied 65 s after
// the return, and not within 30 s in two other runs.
const outageLongEnoughForBackoff = 20 * time.Second

// After an API server outage, a change made right after it returns is
// applied within 5 s of the return, not when client-go's backoff next
// retries, with traffic flowing throughout.
func TestKubeChangeAppliedSoonAfterOutage(t *testing.T) {
	s, k, web, ip1, ip2 := startWeb(t)
	in := startKubeKproxy(t, s, nil)
	e1, e2 := netip.AddrPortFrom(ip1, 8080).String(), netip.AddrPortFrom(ip2, 8080).String()
	in.endpointsAre(t, "default/web:tcp/TCP", e1)
	l := startLoad(web.Spec.ClusterIP + ":18080")

	s.Stop(t)
	time.Sleep(outageLongEnoughForBackoff) // the outage itself is what is tested
	s.Restart(t)
	back := time.Now()

	// A changed slice (the slice informer) and a new service (the service
	// informer too).
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip1.String()), readyEP(ip2.String())))
	k.service("api", 18081, intstr.FromInt32(8080), nil)
	k.apply(k.slice("api", "api-a", 8080, readyEP(ip2.String())))
	made := time.Since(back)
	in.endpointsAre(t, "default/web:tcp/TCP", e1, e2)
	in.endpointsAre(t, "default/api:tcp/TCP", e2)
	applied := time.Since(back)
	t.Logf("changes made %v after the API server returned were applied %v after its return", made.Round(time.Millisecond), applied.Round(time.Millisecond))
	if applied > 5*time.Second {
		t.Errorf("changes applied %v after the API server returned, want within 5s", applied.Round(time.Millisecond))
	}
	l.stopAndCheck(t, "across the outage")
}
