package balancer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// take calls Next(nil) n times.
func take(t *testing.T, r *RoundRobin, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		e, ok := r.Next(nil)
		if !ok {
			t.Fatalf("Next: no endpoint after %d picks", len(out))
		}
		out = append(out, e)
	}
	return out
}

func TestRoundRobinSpreadsEvenly(t *testing.T) {
	r := NewRoundRobin(seeded(1))
	if !r.Update([]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}) {
		t.Fatal("first Update reported no change")
	}
	counts := map[string]int{}
	for _, e := range take(t, r, 300) {
		counts[e]++
	}
	if len(counts) != 3 {
		t.Fatalf("counts = %v, want 3 endpoints", counts)
	}
	for e, c := range counts {
		if c != 100 {
			t.Errorf("%s picked %d times, want 100 (%v)", e, c, counts)
		}
	}
}

func TestRoundRobinFollowsOrder(t *testing.T) {
	r := NewRoundRobin(seeded(2))
	r.Update([]string{"a:1", "b:1", "c:1", "d:1"})
	order := r.Endpoints()
	got := take(t, r, 8)
	want := append(slices.Clone(order), order...)
	if !slices.Equal(got, want) {
		t.Fatalf("picks = %v, want %v", got, want)
	}
}

func TestRoundRobinUpdateSameSetKeepsPosition(t *testing.T) {
	r := NewRoundRobin(seeded(3))
	r.Update([]string{"a:1", "b:1", "c:1"})
	order := r.Endpoints()
	first := take(t, r, 2)

	// Same set, different order and with a duplicate.
	if r.Update([]string{"c:1", "a:1", "b:1", "a:1"}) {
		t.Fatal("Update with the same set reported a change")
	}
	if got := r.Endpoints(); !slices.Equal(got, order) {
		t.Fatalf("order changed to %v, was %v", got, order)
	}
	if e, _ := r.Next(nil); e != order[2] {
		t.Fatalf("after same-set Update Next = %s, want %s (position kept; had %v)", e, order[2], first)
	}
}

func TestRoundRobinUpdateChangedSetReshuffles(t *testing.T) {
	eps := []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1", "g:1", "h:1"}
	r := NewRoundRobin(seeded(4))
	r.Update(eps[:4])
	take(t, r, 3) // move the position off zero

	if !r.Update(append(slices.Clone(eps), "a:1")) { // duplicate ignored
		t.Fatal("Update with a changed set reported no change")
	}
	order := r.Endpoints()
	if !slices.Equal(sorted(order), eps) {
		t.Fatalf("Endpoints = %v, want the members of %v once each", order, eps)
	}
	if r.Len() != len(eps) {
		t.Fatalf("Len = %d, want %d", r.Len(), len(eps))
	}
	// Position reset: the next picks start at the head of the new order.
	if got := take(t, r, len(eps)); !slices.Equal(got, order) {
		t.Fatalf("picks after change = %v, want %v", got, order)
	}

	// Removal is a change too.
	if !r.Update(eps[:7]) {
		t.Fatal("Update removing an endpoint reported no change")
	}
	if r.Has("h:1") || !r.Has("a:1") || r.Len() != 7 {
		t.Fatalf("after removal Endpoints = %v", r.Endpoints())
	}

	// Same seed, same inputs => same order (deterministic given rand).
	r1, r2 := NewRoundRobin(seeded(5)), NewRoundRobin(seeded(5))
	r1.Update(eps)
	r2.Update(eps)
	if !slices.Equal(r1.Endpoints(), r2.Endpoints()) {
		t.Fatalf("same seed gave %v and %v", r1.Endpoints(), r2.Endpoints())
	}
}

func TestRoundRobinShuffleVariesStart(t *testing.T) {
	// Many proxies given the same list must not all start on one endpoint.
	eps := []string{"a:1", "b:1", "c:1", "d:1"}
	firsts := map[string]int{}
	for seed := range uint64(200) {
		r := NewRoundRobin(seeded(seed))
		r.Update(eps)
		e, _ := r.Next(nil)
		firsts[e]++
	}
	for _, e := range eps {
		if firsts[e] < 20 { // expect ~50 each
			t.Errorf("first pick distribution %v: %s too rare", firsts, e)
		}
	}
	// nil rand works and shuffles too.
	r := NewRoundRobin(nil)
	if !r.Update(eps) || !slices.Equal(sorted(r.Endpoints()), eps) {
		t.Fatalf("nil rand: Endpoints = %v", r.Endpoints())
	}
}

func TestRoundRobinExclude(t *testing.T) {
	r := NewRoundRobin(seeded(6))
	r.Update([]string{"a:1", "b:1", "c:1"})
	order := r.Endpoints()

	// Excluding the head skips to the second, and the position moves past it.
	e, ok := r.Next([]string{order[0]})
	if !ok || e != order[1] {
		t.Fatalf("Next(exclude %s) = %s, %v; want %s", order[0], e, ok, order[1])
	}
	if e, _ := r.Next(nil); e != order[2] {
		t.Fatalf("Next after skip = %s, want %s", e, order[2])
	}
	// Only one left.
	e, ok = r.Next([]string{order[0], order[2]})
	if !ok || e != order[1] {
		t.Fatalf("Next(exclude two) = %s, %v; want %s", e, ok, order[1])
	}
	// All excluded: false, position unchanged.
	if e, ok := r.Next(order); ok {
		t.Fatalf("Next(exclude all) = %s, true", e)
	}
	if e, _ := r.Next(nil); e != order[2] {
		t.Fatalf("Next after all-excluded = %s, want %s", e, order[2])
	}
	// Unknown endpoints in exclude are harmless.
	if _, ok := r.Next([]string{"zz:9"}); !ok {
		t.Fatal("Next(exclude unknown) = false")
	}
}

func TestRoundRobinEmpty(t *testing.T) {
	r := NewRoundRobin(seeded(7))
	if _, ok := r.Next(nil); ok {
		t.Fatal("Next on new RoundRobin = true")
	}
	if r.Update(nil) {
		t.Fatal("Update(nil) on empty reported a change")
	}
	r.Update([]string{"a:1"})
	if !r.Update([]string{}) {
		t.Fatal("Update to empty reported no change")
	}
	if _, ok := r.Next(nil); ok || r.Len() != 0 || r.Has("a:1") || len(r.Endpoints()) != 0 {
		t.Fatalf("after emptying: Len=%d Endpoints=%v", r.Len(), r.Endpoints())
	}
}

func TestRoundRobinEndpointsIsCopy(t *testing.T) {
	r := NewRoundRobin(seeded(8))
	r.Update([]string{"a:1", "b:1"})
	got := r.Endpoints()
	got[0] = "mutated"
	if r.Has("mutated") || slices.Contains(r.Endpoints(), "mutated") {
		t.Fatal("Endpoints returned internal slice")
	}
}

func TestRoundRobinNextNoAlloc(t *testing.T) {
	r := NewRoundRobin(seeded(9))
	r.Update([]string{"a:1", "b:1", "c:1"})
	ex := []string{"b:1"}
	if n := testing.AllocsPerRun(1000, func() { r.Next(nil) }); n != 0 {
		t.Errorf("Next(nil) allocs = %v, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { r.Next(ex) }); n != 0 {
		t.Errorf("Next(exclude) allocs = %v, want 0", n)
	}
}

func BenchmarkRoundRobinNext(b *testing.B) {
	r := NewRoundRobin(seeded(10))
	r.Update([]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.Next(nil); !ok {
			b.Fatal("no endpoint")
		}
	}
}

func BenchmarkRoundRobinNextExclude(b *testing.B) {
	r := NewRoundRobin(seeded(10))
	r.Update([]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"})
	ex := []string{"10.0.0.2:80", "10.0.0.4:80"}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.Next(ex); !ok {
			b.Fatal("no endpoint")
		}
	}
}
