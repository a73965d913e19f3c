package datapath

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// A Picker that ignores the endpoints a dial excludes (a stale one, a
// test's) and keeps naming one that refuses must not make the dial spin:
// both data paths give the client up after the second pick, through the
// one ladder they share (dialSeed).
func TestDialGivesUpOnAPickerThatIgnoresExclusions(t *testing.T) {
	for _, loops := range []bool{true, false} {
		name := "goroutines"
		if loops {
			name = "loops"
		}
		t.Run(name, func(t *testing.T) {
			gone, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			refusing := gone.Addr().String()
			gone.Close()
			var picks atomic.Int64
			p := &TCPProxy{EventLoops: loops, Picker: PickerFunc(func(string, []string, bool) (string, error) {
				picks.Add(1)
				return refusing, nil
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
			t.Cleanup(func() {
				// Not waited for: a spinning dial on the loops accepts
				// inside the listener's Control, which Close waits out.
				go ln.Close()
				select {
				case <-served:
				case <-time.After(10 * time.Second):
					t.Error("Serve did not return within 10 s of its listener's close: a dial still spins")
				}
			})

			c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
			if err == nil {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(make([]byte, 16))
			} // else reset before the client's connect returned: given up at once
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after 5 s the client was neither served nor refused (%d picks): the dial spins", picks.Load())
			}
			if err == nil {
				t.Fatal("the client read bytes from an endpoint that refuses")
			}
			if n := picks.Load(); n > 2 {
				t.Errorf("the endpoint was picked %d times, want at most 2 (once, then seen excluded)", n)
			}
		})
	}
}
