package actors

import (
	"slices"
	"time"

	"github.com/kproxy/kproxy/actors/internal/loadtest"
)

// The client load of the crash tests, shared with actors/faults.
type hammer = loadtest.Hammer

var (
	roundTrip    = loadtest.RoundTrip
	startHammer  = loadtest.StartHammer
	openFDs      = loadtest.OpenFDs
	waitBaseline = loadtest.WaitBaseline
)

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}
