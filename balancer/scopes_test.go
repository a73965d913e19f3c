package balancer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

func TestScopesSplitEndpointsByTrafficScope(t *testing.T) {
	s := NewScopes(rand.New(rand.NewPCG(1, 2)))
	s.Update([]*messages.Endpoint{
		{Ips: []string{"192.0.2.1"}, Port: 80, Internal: true, External: true},
		{Ips: []string{"192.0.2.2"}, Port: 80, Internal: true},
		{Ips: []string{"192.0.2.3"}, Port: 80, External: true},
		{Port: 80, Internal: true, External: true}, // no address: unusable
	})
	in := s.Scope(false).Endpoints()
	ex := s.Scope(true).Endpoints()
	slices.Sort(in)
	slices.Sort(ex)
	if want := []string{"192.0.2.1:80", "192.0.2.2:80"}; !slices.Equal(in, want) {
		t.Errorf("internal scope = %v, want %v", in, want)
	}
	if want := []string{"192.0.2.1:80", "192.0.2.3:80"}; !slices.Equal(ex, want) {
		t.Errorf("external scope = %v, want %v", ex, want)
	}
	// Each scope picks only its own endpoints.
	for i := 0; i < 4; i++ {
		if e, _ := s.Next(false, nil); e == "192.0.2.3:80" {
			t.Fatalf("internal pick %d = %s, an external-only endpoint", i, e)
		}
		if e, _ := s.Next(true, nil); e == "192.0.2.2:80" {
			t.Fatalf("external pick %d = %s, an internal-only endpoint", i, e)
		}
	}
	s.Update(nil)
	if e, ok := s.Next(true, nil); ok {
		t.Errorf("pick after emptying = %q, want none", e)
	}
}
