package actors

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

type recordingInvoker struct {
	mu   sync.Mutex
	got  []any
	done chan struct{}
	want int
}

func (r *recordingInvoker) InvokeSystemMessage(m any) { r.record(m) }
func (r *recordingInvoker) InvokeUserMessage(m any)   { r.record(m) }
func (r *recordingInvoker) EscalateFailure(any, any)  {}

func (r *recordingInvoker) record(m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
	if len(r.got) == r.want {
		close(r.done)
	}
}

// Why kproxy has its own mailbox: protoactor's spawn puts the new process
// in the registry before it registers its mailbox's handlers (props.go,
// defaultSpawner), and protoactor's mailbox dispatches a message posted in
// that window on its unset dispatcher: the sender panics.
func TestProtoactorMailboxPanicsBeforeHandlers(t *testing.T) {
	mb := actor.Unbounded()()
	defer func() {
		if recover() == nil {
			t.Fatal("protoactor's mailbox took a message before its handlers without panicking: spawnSafeMailbox may be unneeded")
		}
	}()
	mb.PostUserMessage("early")
}

// Messages posted before the mailbox has its handlers (a sender that found
// a respawned actor in the registry first) are delivered once it has
// them, in order, and posting no longer touches an unset dispatcher.
func TestSpawnSafeMailboxHoldsEarlyMessages(t *testing.T) {
	mb := spawnSafeMailbox()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // concurrently with RegisterHandlers: -race checks the window
		defer wg.Done()
		for i := range 100 {
			mb.PostUserMessage(i)
		}
	}()
	inv := &recordingInvoker{done: make(chan struct{}), want: 100}
	mb.RegisterHandlers(inv, actor.NewDefaultDispatcher(300))
	mb.Start()
	wg.Wait()
	<-inv.done
	for i, m := range inv.got {
		if m != i {
			t.Fatalf("message %d is %v: out of order", i, m)
		}
	}
}

// failingInvoker records messages and escalations; the message "panic"
// panics.
type failingInvoker struct {
	recordingInvoker
	escalated chan any
}

func (f *failingInvoker) InvokeUserMessage(m any) {
	if m == "panic" {
		panic("boom")
	}
	f.record(m)
}

func (f *failingInvoker) EscalateFailure(_ any, m any) { f.escalated <- m }

// As protoactor's mailbox: a panic is escalated with its message; a
// suspended mailbox runs system messages but holds user ones until
// resumed, in order.
func TestMailboxSuspendsAndEscalates(t *testing.T) {
	mb := spawnSafeMailbox()
	inv := &failingInvoker{recordingInvoker: recordingInvoker{done: make(chan struct{}), want: 3}, escalated: make(chan any, 1)}
	mb.RegisterHandlers(inv, actor.NewDefaultDispatcher(300))
	mb.PostSystemMessage(&actor.SuspendMailbox{})
	mb.PostUserMessage("panic")
	mb.PostUserMessage("after")
	mb.PostSystemMessage("system")
	// The system message posted last runs; the user ones before it wait.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		inv.mu.Lock()
		ran := len(inv.got)
		inv.mu.Unlock()
		if ran > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the system message did not run")
		}
	}
	select {
	case m := <-inv.escalated:
		t.Fatalf("a suspended mailbox ran user message %v", m)
	default:
	}
	if n := mb.UserMessageCount(); n != 2 {
		t.Fatalf("%d user messages held, want 2", n)
	}
	mb.PostSystemMessage(&actor.ResumeMailbox{})
	if m := <-inv.escalated; m != "panic" {
		t.Fatalf("escalated %v, want the message that panicked", m)
	}
	mb.PostUserMessage("last")
	<-inv.done
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if want := []any{"system", "after", "last"}; !slices.Equal(inv.got, want) {
		t.Fatalf("ran %v, want %v", inv.got, want)
	}
}
