package datapath

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// recordingKeeper records what a TCPProxy asks of the socket keeper.
type recordingKeeper struct {
	mu      sync.Mutex
	seq     int
	events  []string
	changed chan struct{}
}

func newRecordingKeeper() *recordingKeeper {
	return &recordingKeeper{changed: make(chan struct{}, 100)}
}

func (k *recordingKeeper) note(e string) {
	k.mu.Lock()
	k.events = append(k.events, e)
	k.mu.Unlock()
	k.changed <- struct{}{}
}

func (k *recordingKeeper) Take(string, string) *os.File        { return nil }
func (k *recordingKeeper) Keep(string, string, uintptr)        {}
func (k *recordingKeeper) Drop(string, string)                 {}
func (k *recordingKeeper) DropRest()                           {}
func (k *recordingKeeper) TakeConns(string, string) []KeptConn { return nil }
func (k *recordingKeeper) Detached() bool                      { return false }
func (k *recordingKeeper) KeepsConns() bool                    { return true }
func (k *recordingKeeper) TakeFlows(string, string) []KeptFlow { return nil }
func (k *recordingKeeper) KeepFlow(string, string, string, []byte, int) string {
	return ""
}

func (k *recordingKeeper) KeepConn(_, _, id string, fds ...int) string {
	if id == "" {
		k.mu.Lock()
		k.seq++
		id = fmt.Sprint(k.seq)
		k.mu.Unlock()
	}
	k.note(fmt.Sprintf("keep %s with %d", id, len(fds)))
	return id
}

func (k *recordingKeeper) DropConn(id string) { k.note("drop " + id) }

// waitFor waits until the events are want.
func (k *recordingKeeper) waitFor(t *testing.T, want []string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		k.mu.Lock()
		got := slices.Clone(k.events)
		k.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-k.changed:
		case <-deadline:
			t.Fatalf("the keeper was asked %q, want %q", got, want)
		}
	}
}

// With a keeper, a connection is kept from its accept (the client's
// socket), again once connected (both sockets and the two pipes its
// bytes then cross), and dropped once closed; its bytes go through.
func TestConnectionKeptFromAcceptToClose(t *testing.T) {
	k := newRecordingKeeper()
	p := &TCPProxy{Conns: NewConnTracker(), EventLoops: true, keeper: k, keepsConns: true}
	addr := serveTo(t, p, echoBackend(t))
	if err := echoOnce(addr, "kept"); err != nil {
		t.Fatal(err)
	}
	k.waitFor(t, []string{"keep 1 with 1", "keep 1 with 6", "drop 1"})
}
