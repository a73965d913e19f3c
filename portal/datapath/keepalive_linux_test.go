package datapath

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// With the reaper sweeping, a proxied connection's backend socket gets its
// keepalive at the first sweep instead of at the dial (short connections
// never pay for it); without a reaper the dial sets it.
func TestBackendKeepAliveTurnedOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reaper *IdleReaper
	}{
		{"at the first sweep", &IdleReaper{IdleTimeout: time.Hour, HalfCloseTimeout: 40 * time.Millisecond}},
		{"at the dial without a reaper", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer backend.Close()
			go func() {
				for {
					c, err := backend.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(c, c); c.Close() }()
				}
			}()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			conns := NewConnTracker()
			p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return backend.Addr().String(), nil }),
				Conns: conns, KeepAlive: 7 * time.Minute, Reaper: tc.reaper, Log: zerolog.Nop()}
			defer tc.reaper.Stop()
			go p.Serve(ln.(*net.TCPListener), nil)

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			// The proxied pair's backend socket: found through the tracker.
			var backendConn *net.TCPConn
			for i := range conns.shards {
				s := &conns.shards[i]
				s.mu.Lock()
				for k := range s.conns {
					if tc, ok := k.(*net.TCPConn); ok && tc.RemoteAddr().String() == backend.Addr().String() {
						backendConn = tc
					}
				}
				s.mu.Unlock()
			}
			if backendConn == nil {
				t.Fatal("backend connection not tracked")
			}
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(10 * time.Second)
			for {
				on, idle := keepAliveOf(t, backendConn)
				if on {
					if idle != 7*60 {
						t.Fatalf("TCP_KEEPIDLE = %d s, want 420", idle)
					}
					return
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatal("backend keepalive never turned on")
				}
			}
		})
	}
}

func keepAliveOf(t *testing.T, c *net.TCPConn) (on bool, idle int) {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ka int
	rc.Control(func(fd uintptr) {
		ka, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	})
	return ka != 0, idle
}
