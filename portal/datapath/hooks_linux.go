package datapath

import "sync/atomic"

// The event loops' test hooks, in one place. Production code reads them
// and never sets them; the package's tests do.
var (
	// loopsEverywhere serves every TCPProxy that can on the loops: TestMain
	// runs the package's tests on the goroutine data path, then again with
	// it set.
	loopsEverywhere bool
	// connectInLoop leaves every connect to the loops, as for an endpoint
	// on another node (a local one answers within connectRaw).
	connectInLoop atomic.Bool
	// loopFault, when set, runs before each event is handled: a panic
	// injected there must cost its connection only.
	loopFault atomic.Pointer[func(c *loopConn)]
)
