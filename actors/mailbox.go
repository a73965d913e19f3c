package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// spawnSafeMailbox closes a window in protoactor's spawn: the new process
// is in the registry before its mailbox has a dispatcher, so a message
// sent in between to an actor respawned under the same name (a connection
// asking its Balancer while the ServicePort restarts) reads the
// dispatcher unsynchronised (a data race, and a nil dispatcher panics in
// the sender). Messages posted before RegisterHandlers wait and are posted
// right after it, in order.
//
// The queue is protoactor's lock-free one (a linked list): its unbounded
// ring starts with room for 10 messages, 240 bytes per actor and 720 per
// service port (three actors) that an idle service port never uses.
func spawnSafeMailbox() actor.Mailbox {
	return &safeMailbox{Mailbox: actor.UnboundedLockfree()()}
}

type safeMailbox struct {
	actor.Mailbox
	ready   atomic.Bool
	mu      sync.Mutex
	pending []pendingMessage
}

type pendingMessage struct {
	system bool
	msg    any
}

func (m *safeMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(invoker, dispatcher)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready.Store(true)
	for _, p := range m.pending {
		m.post(p)
	}
	m.pending = nil
}

func (m *safeMailbox) PostUserMessage(msg any) { m.postOrHold(pendingMessage{msg: msg}) }

func (m *safeMailbox) PostSystemMessage(msg any) {
	m.postOrHold(pendingMessage{system: true, msg: msg})
}

func (m *safeMailbox) postOrHold(p pendingMessage) {
	if !m.ready.Load() {
		m.mu.Lock()
		if !m.ready.Load() {
			m.pending = append(m.pending, p)
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
	m.post(p)
}

func (m *safeMailbox) post(p pendingMessage) {
	if p.system {
		m.Mailbox.PostSystemMessage(p.msg)
	} else {
		m.Mailbox.PostUserMessage(p.msg)
	}
}
