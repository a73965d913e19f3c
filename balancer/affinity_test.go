package balancer

import (
	"maps"
	"testing"
	"time"
)

// fakeClock is a manually advanced clock for AffinityTable.now.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestAffinityDefaults(t *testing.T) {
	for _, ttl := range []time.Duration{0, -time.Second} {
		if got := NewAffinityTable(ttl, nil).TTL(); got != DefaultAffinityTimeout {
			t.Errorf("NewAffinityTable(%v).TTL() = %v, want %v", ttl, got, DefaultAffinityTimeout)
		}
	}
	if DefaultAffinityTimeout != 3*time.Hour {
		t.Errorf("DefaultAffinityTimeout = %v", DefaultAffinityTimeout)
	}
	tb := NewAffinityTable(time.Minute, nil) // real clock
	tb.Record("1.1.1.1", "a:1")
	if e, ok := tb.Lookup("1.1.1.1", nil); !ok || e != "a:1" {
		t.Fatalf("Lookup with time.Now = %s, %v", e, ok)
	}
	tb.SetTTL(0)
	if tb.TTL() != DefaultAffinityTimeout {
		t.Errorf("SetTTL(0) gave %v", tb.TTL())
	}
}

func TestAffinityHitMiss(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	if _, ok := tb.Lookup("1.1.1.1", nil); ok {
		t.Fatal("Lookup on empty table hit")
	}
	tb.Record("1.1.1.1", "a:1")
	tb.Record("2.2.2.2", "b:1")
	if e, ok := tb.Lookup("1.1.1.1", nil); !ok || e != "a:1" {
		t.Fatalf("Lookup = %s, %v; want a:1", e, ok)
	}
	if _, ok := tb.Lookup("3.3.3.3", nil); ok {
		t.Fatal("Lookup of unknown client hit")
	}
	tb.Record("1.1.1.1", "c:1") // replace
	if e, _ := tb.Lookup("1.1.1.1", nil); e != "c:1" {
		t.Fatalf("after replace Lookup = %s, want c:1", e)
	}
	// Excluding some other endpoint doesn't matter.
	if e, ok := tb.Lookup("1.1.1.1", []string{"a:1", "b:1"}); !ok || e != "c:1" {
		t.Fatalf("Lookup(exclude others) = %s, %v", e, ok)
	}
	if tb.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tb.Len())
	}
}

func TestAffinityExpiryBoundary(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	tb.Record("1.1.1.1", "a:1")
	tb.Record("2.2.2.2", "b:1")

	c.advance(time.Minute - time.Nanosecond)
	if _, ok := tb.Lookup("1.1.1.1", nil); !ok {
		t.Fatal("entry expired before ttl")
	}
	c.advance(time.Nanosecond) // 2.2.2.2 now exactly ttl old: expired (>=)
	if _, ok := tb.Lookup("2.2.2.2", nil); ok {
		t.Fatal("entry still live at exactly ttl")
	}
	if tb.Len() != 1 {
		t.Fatalf("expired entry not deleted on Lookup: Len = %d", tb.Len())
	}
}

func TestAffinityRefreshOnHit(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	tb.Record("1.1.1.1", "a:1")
	tb.Record("2.2.2.2", "b:1")
	for range 5 { // 5 × 50s = 250s, far past ttl, but each hit refreshes
		c.advance(50 * time.Second)
		if _, ok := tb.Lookup("1.1.1.1", nil); !ok {
			t.Fatal("refreshed entry expired")
		}
	}
	if _, ok := tb.Lookup("2.2.2.2", nil); ok {
		t.Fatal("unrefreshed entry still live")
	}
	c.advance(time.Minute)
	if _, ok := tb.Lookup("1.1.1.1", nil); ok {
		t.Fatal("entry live a full ttl after its last hit")
	}
}

func TestAffinitySetTTL(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Hour, c.now)
	tb.Record("1.1.1.1", "a:1")
	c.advance(10 * time.Minute)
	tb.Record("2.2.2.2", "b:1")
	c.advance(5 * time.Minute) // ages: 15m and 5m

	tb.SetTTL(10 * time.Minute)
	if tb.TTL() != 10*time.Minute {
		t.Fatalf("TTL = %v", tb.TTL())
	}
	if got := tb.Entries(); !maps.Equal(got, map[string]string{"2.2.2.2": "b:1"}) {
		t.Fatalf("Entries after shortening = %v", got)
	}
	if n := tb.Sweep(); n != 1 {
		t.Fatalf("Sweep after shortening = %d, want 1", n)
	}
	if _, ok := tb.Lookup("1.1.1.1", nil); ok {
		t.Fatal("old entry survived shortened ttl")
	}
	if _, ok := tb.Lookup("2.2.2.2", nil); !ok { // refreshed now
		t.Fatal("young entry expired")
	}

	// Lengthening revives an entry not yet swept.
	c.advance(20 * time.Minute)
	tb.SetTTL(time.Hour)
	if _, ok := tb.Lookup("2.2.2.2", nil); !ok {
		t.Fatal("lengthened ttl did not apply to existing entry")
	}
}

func TestAffinityExcludedEntryDropped(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	tb.Record("1.1.1.1", "a:1")
	if _, ok := tb.Lookup("1.1.1.1", []string{"a:1"}); ok {
		t.Fatal("Lookup returned an excluded endpoint")
	}
	if tb.Len() != 0 {
		t.Fatalf("excluded entry kept: Len = %d", tb.Len())
	}
	if _, ok := tb.Lookup("1.1.1.1", nil); ok {
		t.Fatal("excluded entry still present")
	}
}

func TestAffinityRetain(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	tb.Record("1.1.1.1", "a:1")
	tb.Record("2.2.2.2", "b:1")
	tb.Record("3.3.3.3", "b:1")
	tb.Record("4.4.4.4", "c:1")

	rr := NewRoundRobin(seeded(1))
	rr.Update([]string{"a:1", "c:1"}) // b:1 removed from the service
	if n := tb.Retain(rr.Has); n != 2 {
		t.Fatalf("Retain dropped %d, want 2", n)
	}
	want := map[string]string{"1.1.1.1": "a:1", "4.4.4.4": "c:1"}
	if got := tb.Entries(); !maps.Equal(got, want) {
		t.Fatalf("Entries = %v, want %v", got, want)
	}
	if n := tb.Retain(rr.Has); n != 0 {
		t.Fatalf("second Retain dropped %d", n)
	}
}

func TestAffinitySweep(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	if n := tb.Sweep(); n != 0 {
		t.Fatalf("Sweep on empty = %d", n)
	}
	tb.Record("1.1.1.1", "a:1")
	tb.Record("2.2.2.2", "b:1")
	c.advance(30 * time.Second)
	tb.Record("3.3.3.3", "c:1")
	if n := tb.Sweep(); n != 0 {
		t.Fatalf("Sweep before expiry = %d", n)
	}
	c.advance(30 * time.Second) // first two exactly at ttl
	if n := tb.Sweep(); n != 2 {
		t.Fatalf("Sweep = %d, want 2", n)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tb.Len())
	}
	c.advance(time.Hour)
	if n := tb.Sweep(); n != 1 || tb.Len() != 0 {
		t.Fatalf("final Sweep = %d, Len = %d", n, tb.Len())
	}
}

func TestAffinityEntriesIsCopy(t *testing.T) {
	c := newFakeClock()
	tb := NewAffinityTable(time.Minute, c.now)
	tb.Record("1.1.1.1", "a:1")
	got := tb.Entries()
	got["1.1.1.1"] = "x:1"
	got["9.9.9.9"] = "y:1"
	if e, _ := tb.Lookup("1.1.1.1", nil); e != "a:1" || tb.Len() != 1 {
		t.Fatalf("Entries aliases the table: %s, Len %d", e, tb.Len())
	}
}
