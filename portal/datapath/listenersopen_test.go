package datapath

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// Sockets are opened without the set's lock: while one opening waits in
// its system calls, another address opens, and the address being opened
// is refused to another owner and counted against the open-file limit.
func TestListenersOpenConcurrently(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := ListenSpec{Network: "tcp", Address: "127.0.0.1:0"}
	openSocket = func(spec ListenSpec) (*Listener, error) {
		if spec == slow {
			close(entered)
			<-release
		}
		return Open(spec)
	}
	t.Cleanup(func() { openSocket = Open })
	s := NewListeners()
	a, b := s.Sockets("a"), s.Sockets("b")
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		_, err := a.Open(slow)
		done <- err
	}()
	<-entered

	other := make(chan error, 1)
	go func() {
		_, err := b.Open(ListenSpec{Network: "tcp", Address: "127.0.0.2:0"})
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("an opening waited for another one's system calls")
	}
	if _, err := b.Open(slow); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("the address being opened for another owner: %v, want EADDRINUSE", err)
	}
	// Two open, one opening: a limit that leaves room for two refuses.
	s.SetFDLimit(ControlPlaneFDs(0) + 2)
	if _, err := b.Open(ListenSpec{Network: "tcp", Address: "127.0.0.3:0"}); !errors.Is(err, ErrFDLimit) {
		t.Errorf("past the limit with one socket being opened: %v, want ErrFDLimit", err)
	}
	s.SetFDLimit(0)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("%d listeners recorded, want 2", n)
	}
}
