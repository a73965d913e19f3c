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
	in := s.poolFor(false, "").Endpoints()
	ex := s.poolFor(true, "").Endpoints()
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
		if e, _ := s.Next(false, "", nil); e == "192.0.2.3:80" {
			t.Fatalf("internal pick %d = %s, an external-only endpoint", i, e)
		}
		if e, _ := s.Next(true, "", nil); e == "192.0.2.2:80" {
			t.Fatalf("external pick %d = %s, an internal-only endpoint", i, e)
		}
	}
	s.Update(nil)
	if e, ok := s.Next(true, "", nil); ok {
		t.Errorf("pick after emptying = %q, want none", e)
	}
}

// Dual stack: a client is served from its own family's endpoints, in
// each scope; a client of unknown family from all of them.
func TestScopesServeEachFamilyFromItsOwnEndpoints(t *testing.T) {
	s := NewScopes(rand.New(rand.NewPCG(3, 4)))
	s.Update([]*messages.Endpoint{
		{Ips: []string{"192.0.2.1"}, Port: 80, Internal: true, External: true},
		{Ips: []string{"192.0.2.2"}, Port: 80, Internal: true},
		{Ips: []string{"2001:db8::1"}, Port: 80, Internal: true, External: true},
	})
	for _, tc := range []struct {
		client   string
		external bool
		want     []string
	}{
		{"198.51.100.7", false, []string{"192.0.2.1:80", "192.0.2.2:80"}},
		{"::ffff:198.51.100.7", false, []string{"192.0.2.1:80", "192.0.2.2:80"}},
		{"2001:db8:9::7", false, []string{"[2001:db8::1]:80"}},
		{"198.51.100.7", true, []string{"192.0.2.1:80"}},
		{"2001:db8:9::7", true, []string{"[2001:db8::1]:80"}},
		{"", false, []string{"192.0.2.1:80", "192.0.2.2:80", "[2001:db8::1]:80"}},
	} {
		got := map[string]bool{}
		for range 12 {
			e, ok := s.Next(tc.external, tc.client, nil)
			if !ok {
				t.Fatalf("client %q external=%v: no endpoint", tc.client, tc.external)
			}
			got[e] = true
		}
		var list []string
		for e := range got {
			list = append(list, e)
		}
		slices.Sort(list)
		if !slices.Equal(list, tc.want) {
			t.Errorf("client %q external=%v reached %v, want %v", tc.client, tc.external, list, tc.want)
		}
	}
}
