package remote

import (
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// restartStrategy supervises the core's and the subscriber's actors as the
// node proxy's tree supervises its own (actors.childStrategy, of which this
// is a copy, so this package needs nothing of the node proxy): only the
// failed actor restarts, at once for the first Burst failures within
// Window, then after a delay that doubles per further failure up to
// MaxDelay. It never gives up: a core that stopped serving, or a backend
// that stopped following its core, would be an outage nobody asked for.
type restartStrategy struct {
	Burst    int
	Window   time.Duration
	Base     time.Duration
	MaxDelay time.Duration
}

var childStrategy actor.SupervisorStrategy = &restartStrategy{Burst: 20, Window: time.Second, Base: 10 * time.Millisecond, MaxDelay: 5 * time.Second}

func (s *restartStrategy) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, _ any) {
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
