package balancer

import (
	"slices"
	"testing"
	"time"
)

var testOutliers = OutlierConfig{ConsecutiveFailures: 3, BaseEjection: time.Second, MaxEjection: 4 * time.Second}

func TestOutliersEjectAfterConsecutiveFailures(t *testing.T) {
	o := NewOutliers(testOutliers)
	t0 := time.Unix(1000, 0)
	members := []string{"a", "b", "c"}
	if d := o.Failed("a", t0); d != 0 {
		t.Fatalf("first failure ejected for %v", d)
	}
	o.Failed("a", t0)
	// A success between failures resets the count: failures must be in a row.
	o.Succeeded("a")
	if o.Watched("a") {
		t.Fatal("a success left a record")
	}
	for i := range 2 {
		if d := o.Failed("a", t0); d != 0 {
			t.Fatalf("failure %d after a success ejected", i+1)
		}
	}
	if d := o.Failed("a", t0); d != time.Second {
		t.Fatalf("third failure in a row: ejected for %v, want 1s", d)
	}
	if got := o.Skip(members, nil); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Skip = %v, want [a]", got)
	}
	// Failures of dials picked before the ejection do not lengthen it.
	if d := o.Failed("a", t0.Add(500*time.Millisecond)); d != 0 {
		t.Fatalf("failure while ejected re-ejected for %v", d)
	}
	if got := o.Ejections(); len(got) != 1 || got[0].Until != t0.Add(time.Second) || got[0].Ejections != 1 {
		t.Fatalf("Ejections = %+v", got)
	}
}

func TestOutliersEjectionSaysWhy(t *testing.T) {
	o := NewOutliers(testOutliers)
	now := time.Unix(1000, 0)
	o.Explain("a", "no record yet") // a healthy endpoint keeps no record
	if o.Watching() {
		t.Fatal("Explain made a record")
	}
	for _, cause := range []string{"connection refused", "connection refused", "no route to host"} {
		o.Failed("a", now)
		o.Explain("a", cause)
	}
	if got := o.Ejections(); len(got) != 1 || got[0].LastError != "no route to host" {
		t.Fatalf("Ejections = %+v, want the last failure's error", got)
	}
}

func TestOutliersProbeBacksOff(t *testing.T) {
	o := NewOutliers(testOutliers)
	now := time.Unix(1000, 0)
	for range 3 {
		o.Failed("a", now)
	}
	// Each failed probe, made when the ejection is up, doubles the
	// ejection, up to the cap; the endpoint stays ejected all along.
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		now = o.Ejections()[0].Until
		if !o.Ejected("a") {
			t.Fatal("an endpoint whose ejection is up is used before a probe succeeded")
		}
		if d := o.Failed("a", now.Add(time.Second)); d != want {
			t.Fatalf("failed probe: ejected for %v, want %v", d, want)
		}
	}
	if !o.Succeeded("a") {
		t.Fatal("a successful probe did not restore an ejected endpoint")
	}
	if o.Ejected("a") || len(o.Ejections()) != 0 || o.Watching() {
		t.Fatalf("after a success: %+v", o.Ejections())
	}
}

// Envoy's panic threshold: below 50% un-ejected endpoints in a pool,
// ejections are ignored there, so the last endpoints always serve.
func TestOutliersPanicThreshold(t *testing.T) {
	o := NewOutliers(testOutliers)
	now := time.Unix(1000, 0)
	for _, ep := range []string{"a", "b"} {
		for range 3 {
			o.Failed(ep, now)
		}
	}
	cases := []struct {
		members, want []string
	}{
		{[]string{"a", "b", "c", "d"}, []string{"x", "a", "b"}}, // 50% left: eject
		{[]string{"a", "b", "c"}, []string{"x"}},                // 33% left: panic
		{[]string{"a", "c"}, []string{"x", "a"}},
		{[]string{"a"}, []string{"x"}},
	}
	for _, c := range cases {
		exclude := []string{"x"}
		if got := o.Skip(c.members, exclude); !slices.Equal(got, c.want) {
			t.Errorf("Skip(%v) = %v, want %v", c.members, got, c.want)
		}
		if !slices.Equal(exclude, []string{"x"}) {
			t.Fatalf("Skip changed the caller's exclude: %v", exclude)
		}
	}
}

func TestOutliersOffAndRetain(t *testing.T) {
	off := NewOutliers(OutlierConfig{BaseEjection: time.Second, MaxEjection: time.Second})
	for range 10 {
		if d := off.Failed("a", time.Unix(1000, 0)); d != 0 {
			t.Fatal("ejected with detection off")
		}
	}
	o := NewOutliers(testOutliers)
	for range 3 {
		o.Failed("a", time.Unix(1000, 0))
	}
	o.Failed("b", time.Unix(1000, 0))
	if o.Retain([]string{"a", "b"}) {
		t.Fatal("Retain of every endpoint reported a change")
	}
	if !o.Retain([]string{"b"}) || o.Watched("a") || !o.Watched("b") {
		t.Fatal("Retain did not forget the removed ejected endpoint only")
	}
}

// The healthy path must not allocate: Skip runs for every connection.
func TestOutliersSkipDoesNotAllocateWhenHealthy(t *testing.T) {
	o := NewOutliers(testOutliers)
	members, exclude := []string{"a", "b"}, []string{"c"}
	o.Failed("a", time.Unix(1000, 0)) // a record, but not ejected
	if n := testing.AllocsPerRun(100, func() { o.Skip(members, exclude) }); n != 0 {
		t.Fatalf("Skip allocates %v times", n)
	}
}

// A dial that times out may only have met a full accept queue (the SYN
// dropped, retransmitted by the kernel after 1 s): it does not count like
// a refusal. Timeouts eject only an endpoint that answered nothing for
// StallAfter; refusals eject as before.
func TestOutliersSlowConnectsAreNotRefusals(t *testing.T) {
	o := NewOutliers(testOutliers)
	t0 := time.Unix(1000, 0)
	for i := range 20 {
		if d := o.TimedOut("slow", t0.Add(time.Duration(i)*StallAfter/20)); d != 0 {
			t.Fatalf("timeout %d within %v of the first ejected for %v", i+1, StallAfter, d)
		}
	}
	if o.Ejected("slow") || !o.Watched("slow") {
		t.Fatal("timed-out dials: want a record (the next success is reported), no ejection")
	}
	// A success ends the slow spell: the window starts again.
	o.Succeeded("slow")
	later := t0.Add(10 * StallAfter)
	for i := range 3 {
		if d := o.TimedOut("slow", later.Add(time.Duration(i)*time.Millisecond)); d != 0 {
			t.Fatalf("timeout %d after a success ejected for %v", i+1, d)
		}
	}
	// Refusals still count at once.
	for range 2 {
		o.Failed("refused", t0)
	}
	if d := o.Failed("refused", t0); d != time.Second {
		t.Fatalf("third refusal in a row: ejected for %v, want 1s", d)
	}
	// An endpoint that answers nothing for StallAfter is stalled: its
	// timeouts then count as failures.
	o.TimedOut("dead", t0)
	stalled := t0.Add(StallAfter)
	for i := range 2 {
		if d := o.TimedOut("dead", stalled); d != 0 {
			t.Fatalf("counted timeout %d ejected", i+1)
		}
	}
	if d := o.TimedOut("dead", stalled); d != time.Second {
		t.Fatalf("third timeout past %v: ejected for %v, want 1s", StallAfter, d)
	}
	// A probe that times out ejects it again at once.
	if d := o.TimedOut("dead", stalled.Add(time.Second)); d != 2*time.Second {
		t.Fatalf("timed-out probe: ejected for %v, want 2s", d)
	}
}
