package balancer

import (
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// A pin made through the cluster IP does not carry over to node-port
// traffic, which with externalTrafficPolicy Local may only use local
// endpoints; each scope's pins go when their endpoint leaves that scope.
func TestScopedAffinityPinsPerScope(t *testing.T) {
	a := NewScopedAffinity(time.Hour, nil)
	const client = "198.51.100.7"
	if got, _ := a.Pick(false, client, nil, "192.0.2.2:80"); got != "192.0.2.2:80" {
		t.Fatalf("internal pick = %s", got)
	}
	if got, _ := a.Pick(false, client, nil, "192.0.2.1:80"); got != "192.0.2.2:80" {
		t.Fatalf("internal pick = %s, want the pinned 192.0.2.2:80", got)
	}
	if got, _ := a.Pick(true, client, nil, "192.0.2.1:80"); got != "192.0.2.1:80" {
		t.Fatalf("external pick = %s, want its own round-robin choice, not the internal pin", got)
	}
	if got, _ := a.Pick(true, client, nil, "192.0.2.9:80"); got != "192.0.2.1:80" {
		t.Fatalf("external pick = %s, want the external pin", got)
	}

	// 192.0.2.1 stays internal but leaves the external scope.
	a.Retain([]*messages.Endpoint{
		{Ips: []string{"192.0.2.1"}, Port: 80, Internal: true},
		{Ips: []string{"192.0.2.2"}, Port: 80, Internal: true, External: true},
	}, false)
	if a.Table(true).Len() != 0 || a.Table(false).Len() != 1 {
		t.Fatalf("after Retain: %d internal, %d external pins; want 1 and 0", a.Table(false).Len(), a.Table(true).Len())
	}
}
