package actors

import (
	"sync"
	"testing"

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
