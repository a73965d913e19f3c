package liveview

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
)

// readyTimeout bounds the wait for a failed actor to answer again (the
// supervision strategy's backoff is at most 5 s).
const readyTimeout = 15 * time.Second

// follow feeds m and h from what p publishes: every service port report
// and every supervision event. It returns the function that stops it.
func follow(p *actors.Proxy, m *model, h *hub) (stop func()) {
	unsubscribe := p.Subscribe(func(st *messages.ServicePortState) {
		change := m.reported(st)
		if change == "" {
			return
		}
		id := st.GetKey().ID()
		text := id + " " + change
		if change != "deleted" {
			text += ": generation " + strconv.FormatInt(st.GetGeneration(), 10) + ", " + strconv.Itoa(len(st.GetEndpoints())) + " endpoints"
		}
		// The stream adds the row as it sends the event: not built here, on
		// the Proxier's goroutine.
		h.publish(Event{Kind: kindChange, At: time.Now(), Text: text, ServicePort: id})
	})
	sub := p.System.EventStream.Subscribe(func(evt any) {
		e, ok := evt.(*actor.SupervisorEvent)
		if !ok {
			return
		}
		at, id, reason := time.Now(), e.Child.GetId(), fmt.Sprint(e.Reason)
		sp, role := m.failed(id, at, reason)
		// The callback runs on the failed actor's supervisor: wait for the
		// restart elsewhere.
		go awaitRestart(p, m, h, e.Child, at, sp, role, reason)
	})
	return func() {
		unsubscribe()
		p.System.EventStream.Unsubscribe(sub)
	}
}

// awaitRestart waits until the failed actor's new incarnation answers a
// message (protoactor's Touch, which every actor answers), and publishes
// the restart with how long it took. A message sent while the actor
// restarts waits in its suspended mailbox, so the answer comes from the
// new incarnation once it started. A ServicePort's child that its parent
// replaced meanwhile is a dead letter for an instant: asked again.
func awaitRestart(p *actors.Proxy, m *model, h *hub, pid *actor.PID, at time.Time, sp, role, reason string) {
	deadline := at.Add(readyTimeout)
	var err error
	for wait := 5 * time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 500*time.Millisecond) {
		_, err = p.System.Root.RequestFuture(pid, &actor.Touch{}, time.Until(deadline)).Result()
		if !errors.Is(err, actor.ErrDeadLetter) || !m.alive(pid.GetId()) {
			break
		}
		time.Sleep(wait)
	}
	took := time.Since(at)
	ev := Event{Kind: kindRestart, At: time.Now(), ServicePort: sp, Role: role, Actor: pid.GetId(), Reason: reason, TookMs: ms(took)}
	name := role
	if sp != "" {
		name = sp + " " + role
	}
	if err != nil {
		// Gone (its service port was deleted) or still backing off.
		ev.Text = fmt.Sprintf("%s failed (%s); not answering after %v: %v", name, reason, took.Round(time.Millisecond), err)
	} else {
		m.back(pid.GetId(), took)
		ev.Text = fmt.Sprintf("%s crashed (%s) → restarted in %v", name, reason, took.Round(10*time.Microsecond))
	}
	h.publish(ev)
}
