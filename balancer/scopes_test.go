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
	}, false)
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
	s.Update(nil, false)
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
	}, false)
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

// Under both traffic policies Local in a kernel mode, the external proxy
// port serves the cluster's endpoints: the external scope is then those
// with cluster set, whatever external says.
func TestScopesExternalScopeIsCluster(t *testing.T) {
	s := NewScopes(rand.New(rand.NewPCG(5, 6)))
	eps := []*messages.Endpoint{
		{Ips: []string{"192.0.2.1"}, Port: 80, Internal: true, External: true, Cluster: true, Local: true},
		{Ips: []string{"192.0.2.2"}, Port: 80, Cluster: true}, // on another node
	}
	s.Update(eps, true)
	ex := s.poolFor(true, "").Endpoints()
	slices.Sort(ex)
	if want := []string{"192.0.2.1:80", "192.0.2.2:80"}; !slices.Equal(ex, want) {
		t.Errorf("external scope, cluster's = %v, want %v", ex, want)
	}
	if in := s.poolFor(false, "").Endpoints(); !slices.Equal(in, []string{"192.0.2.1:80"}) {
		t.Errorf("internal scope = %v, want the local endpoint", in)
	}
	s.Update(eps, false)
	if ex := s.poolFor(true, "").Endpoints(); !slices.Equal(ex, []string{"192.0.2.1:80"}) {
		t.Errorf("external scope = %v, want the external endpoint", ex)
	}
	a := NewScopedAffinity(0, nil)
	a.Table(true).Record("198.51.100.7", "192.0.2.2:80")
	a.Retain(eps, true)
	if ep, ok := a.Table(true).Lookup("198.51.100.7", nil); !ok || ep != "192.0.2.2:80" {
		t.Errorf("a pin to a cluster endpoint in the cluster's external scope went: %q %v", ep, ok)
	}
	a.Retain(eps, false)
	if ep, ok := a.Table(true).Lookup("198.51.100.7", nil); ok {
		t.Errorf("a pin to a non-external endpoint stayed in the external scope: %q", ep)
	}
}
