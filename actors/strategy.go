package actors

import (
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// restartStrategy is kproxy's one-for-one supervision: only the failed
// child restarts, at once for the first Burst failures within Window (a
// crashed Portal is back within milliseconds), then after a delay that
// doubles per further failure up to MaxDelay, so a child that keeps
// crashing backs off instead of spinning. It never gives up: a service
// port that stopped for good would be an outage nobody asked for. (The
// protoactor one-for-one strategy stops a child after N failures; its
// "exponential" backoff is linear.)
//
// Its directive is always Restart, never Resume: what must outlive an
// incarnation lives outside it (a service port's record, the Proxier's
// desired state, the Watcher's and Rules' state), so a restart loses
// nothing, while Resume would keep an actor whose state the panic may
// have left half-changed.
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
