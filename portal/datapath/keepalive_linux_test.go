package datapath

import (
	"io"
	"net"
	"testing"
	"time"

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
				Conns: conns, KeepAlive: 7 * time.Minute, Reaper: tc.reaper}
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
			backendFD := trackedBackendFD(t, conns, backend.Addr().String())
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(10 * time.Second)
			// SO_KEEPALIVE and TCP_KEEPIDLE are two setsockopts: a look
			// between them sees keepalive on with the kernel's idle.
			for {
				on, idle := keepAliveOf(backendFD)
				if on && idle == 7*60 {
					return
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatalf("backend keepalive: on %v, TCP_KEEPIDLE %d s; want on, 420 s", on, idle)
				}
			}
		})
	}
}

func keepAliveOf(fd int) (on bool, idle int) {
	ka, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	idle, _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	return ka != 0, idle
}

// trackedBackendFD is the descriptor of the tracked connection's socket
// to backend: a goroutine pair's, or an event loop's.
func trackedBackendFD(t *testing.T, conns *ConnTracker, backend string) int {
	t.Helper()
	fd := -1
	for i := range conns.shards {
		s := &conns.shards[i]
		s.mu.Lock()
		for k := range s.conns {
			switch c := k.(type) {
			case *net.TCPConn:
				if c.RemoteAddr().String() == backend {
					rc, err := c.SyscallConn()
					if err != nil {
						t.Fatal(err)
					}
					rc.Control(func(f uintptr) { fd = int(f) })
				}
			case *loopConn:
				fd = int(c.fd[1])
			}
		}
		s.mu.Unlock()
	}
	if fd < 0 {
		t.Fatal("backend connection not tracked")
	}
	return fd
}
