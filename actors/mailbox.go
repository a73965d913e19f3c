package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// spawnSafeMailbox is the mailbox of every actor kproxy spawns per
// service port. It behaves as protoactor's default one (system messages
// first, suspended on failure until resumed, a panic escalated to the
// supervisor, the dispatcher's throughput then a yield) with two
// differences:
//
// It closes a window in protoactor's spawn: the new process is in the
// registry before its mailbox has a dispatcher, so a message sent in
// between to an actor respawned under the same name (a connection asking
// its Balancer while the ServicePort restarts) read the dispatcher
// unsynchronised (a data race, and a nil dispatcher panics in the
// sender). A message posted before RegisterHandlers waits in the queue
// and is run right after it, in order.
//
// And an idle actor's mailbox is one small struct: the queues are slices
// under a mutex, dropped when drained. protoactor's lock-free mailbox keeps
// two queues with a node each besides its struct, its default one a ring
// of ten slots per queue, and there are three actors per service port.
func spawnSafeMailbox() actor.Mailbox { return &mailbox{} }

type mailbox struct {
	mu         sync.Mutex
	user, sys  []any
	running    bool // scheduled on the dispatcher, or running
	suspended  bool
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

func (m *mailbox) PostUserMessage(msg any) {
	// As protoactor's: a batch's messages are posted one by one, then
	// the batch itself.
	if batch, ok := msg.(actor.MessageBatch); ok {
		for _, b := range batch.GetMessages() {
			m.PostUserMessage(b)
		}
	}
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		if batch, ok := env.Message.(actor.MessageBatch); ok {
			for _, b := range batch.GetMessages() {
				m.PostUserMessage(b)
			}
		}
	}
	m.mu.Lock()
	m.user = append(m.user, msg)
	m.scheduleLocked()
}

func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys = append(m.sys, msg)
	m.scheduleLocked()
}

// scheduleLocked starts processing on the dispatcher unless it runs or
// there is none yet, and unlocks m.
func (m *mailbox) scheduleLocked() {
	start := !m.running && m.dispatcher != nil
	if start {
		m.running = true
	}
	d := m.dispatcher
	m.mu.Unlock()
	if start {
		d.Schedule(m.process)
	}
}

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.mu.Lock()
	m.invoker, m.dispatcher = invoker, dispatcher
	if len(m.sys) == 0 && len(m.user) == 0 {
		m.mu.Unlock()
		return
	}
	m.scheduleLocked()
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.user)
}

// process runs messages until none is left that may run, then ends the
// scheduling, unless a message came meanwhile.
func (m *mailbox) process() {
	for {
		m.run()
		m.mu.Lock()
		if len(m.sys) == 0 && (m.suspended || len(m.user) == 0) {
			m.running = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// run invokes messages, system ones first, while any may run; a panic is
// the invoker's failure to escalate (its supervisor decides).
func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	i, t := 0, m.dispatcher.Throughput()
	for {
		if i > t {
			i = 0
			runtime.Gosched()
		}
		i++
		var system bool
		if msg, system = m.next(); msg == nil {
			return
		}
		if system {
			m.invoker.InvokeSystemMessage(msg)
		} else {
			m.invoker.InvokeUserMessage(msg)
		}
	}
}

// next takes the next message that may run: a system message, else,
// unless suspended, a user message; nil when none. Suspension and
// resumption are the mailbox's own.
func (m *mailbox) next() (msg any, system bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.sys) > 0 {
		msg = pop(&m.sys)
		switch msg.(type) {
		case *actor.SuspendMailbox:
			m.suspended = true
		case *actor.ResumeMailbox:
			m.suspended = false
		default:
			return msg, true
		}
	}
	if m.suspended || len(m.user) == 0 {
		return nil, false
	}
	return pop(&m.user), false
}

// pop takes the first of *q, dropping the slice once drained so an idle
// mailbox holds none.
func pop(q *[]any) any {
	msg := (*q)[0]
	(*q)[0] = nil
	if len(*q) == 1 {
		*q = nil
	} else {
		*q = (*q)[1:]
	}
	return msg
}
