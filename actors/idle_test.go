package actors

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// silentBackend accepts connections and never reads or writes: a backend
// that hangs.
func silentBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// closedWithin waits (at most d) for the proxy to close c, returning how long.
func closedWithin(c net.Conn, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(start), false
	}
	return time.Since(start), true
}

// Idle connections are closed after the idle timeout, half-closed ones
// after the shorter half-close timeout, and busy ones never.
func TestIdleAndHalfClosedConnectionsReaped(t *testing.T) {
	p := Start(Config{BindAddress: "127.0.0.1", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Reaper: &datapath.IdleReaper{IdleTimeout: 1500 * time.Millisecond, HalfCloseTimeout: 200 * time.Millisecond}})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	busy := svcPort("busy", messages.Protocol_TCP, "127.0.20.40", 18080)
	hung := svcPort("hung", messages.Protocol_TCP, "127.0.20.41", 18080)
	p.Submit(snapshot(1, spe(busy, endpoints(tcpBackends(t, 1)...)), spe(hung, endpoints(silentBackend(t)))))
	w.listening(t, busy.GetKey().ID(), 1, 1)
	w.listening(t, hung.GetKey().ID(), 1, 1)

	dial := func(addr string) *net.TCPConn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.TCPConn)
	}
	idle := dial("127.0.20.41:18080")
	half := dial("127.0.20.41:18080")
	active := dial("127.0.20.40:18080")
	if _, err := readLine(active); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	half.CloseWrite() // the silent backend never answers nor closes

	// Busy: a line every 100 ms, echoed, for longer than the idle timeout.
	stopBusy := make(chan error, 1)
	go func() {
		for range 25 {
			active.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := active.Write([]byte("ping\n")); err != nil {
				stopBusy <- err
				return
			}
			if _, err := readLine(active); err != nil {
				stopBusy <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopBusy <- nil
	}()

	if d, ok := closedWithin(half, 3*time.Second); !ok || d > time.Second {
		t.Errorf("half-closed connection to a silent backend: closed %v after %v, want within 1s (200 ms timeout)", ok, d)
	}
	if d, ok := closedWithin(idle, 4*time.Second); !ok || time.Since(start) < 1400*time.Millisecond {
		t.Errorf("idle connection: closed %v after %v (%v since start), want after the 1.5s idle timeout", ok, d, time.Since(start))
	}
	if err := <-stopBusy; err != nil {
		t.Errorf("busy connection broke: %v", err)
	}
}
