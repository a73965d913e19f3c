package actors

import (
	"slices"
	"time"

	"github.com/kproxy/kproxy/test/actortest"
)

// The client load of the crash tests, shared with actors/faults.
type hammer = actortest.Hammer

var (
	roundTrip    = actortest.RoundTrip
	startHammer  = actortest.StartHammer
	openFDs      = actortest.OpenFDs
	waitBaseline = actortest.WaitBaseline
)

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}
