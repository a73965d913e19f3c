package supervision

import (
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Strategy is kproxy's one-for-one supervision: only the failed child
// restarts, at once for the first Burst failures within Window (a
// crashed Portal is back within milliseconds), then after a delay that
// doubles per further failure up to MaxDelay, so a child that keeps
// crashing backs off instead of spinning. It never gives up: a service
// port that stopped for good, a core that stopped serving or a backend
// that stopped following its core would be an outage nobody asked for.
// (The protoactor one-for-one strategy stops a child after N failures;
// its "exponential" backoff is linear.)
//
// Its directive is always Restart, never Resume: what must outlive an
// incarnation lives outside it (a service port's record, the Proxier's
// desired state, the Watcher's and Rules' state, a backend's store), so a
// restart loses nothing, while Resume would keep an actor whose state the
// panic may have left half-changed.
type Strategy struct {
	Burst    int
	Window   time.Duration
	Base     time.Duration
	MaxDelay time.Duration
}

// Default is the Strategy every kproxy actor is supervised by: 20
// immediate restarts a second, then from 10 ms backing off to 5 s.
var Default actor.SupervisorStrategy = &Strategy{Burst: 20, Window: time.Second, Base: 10 * time.Millisecond, MaxDelay: 5 * time.Second}

// HandleFailure restarts child, at once or after the backoff delay.
func (s *Strategy) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, _ any) {
	if rs.NumberOfFailures(s.Window) == 0 {
		rs.Reset() // keeps the failure history bounded
	}
	rs.Fail()
	system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.RestartDirective})
	over := rs.NumberOfFailures(s.Window) - s.Burst
	if over <= 0 {
		sup.RestartChildren(child)
		return
	}
	delay := s.MaxDelay
	if over < 20 && s.Base<<over < s.MaxDelay {
		delay = s.Base << over
	}
	delay = delay/2 + rand.N(delay/2+1)
	time.AfterFunc(delay, func() { sup.RestartChildren(child) })
}
