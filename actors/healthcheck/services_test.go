package healthcheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// freePort returns a loopback port nothing listens on just now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// probe asks a health-check node port as a load balancer does, on a new
// connection.
func probe(port int) (int, string, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitFor polls cond (every 10 ms, at most 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A health-check node port held by a socket outside kproxy's group opens
// by itself once the port is free, with no change to its service.
func TestServicesRetryOpenByItself(t *testing.T) {
	port := freePort(t)
	squatter, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	s := NewServices([]string{"127.0.0.1"}, nil, zerolog.Nop())
	defer s.Close()
	s.Upsert("ns/web:http/TCP", "ns", "web", port, 1)
	s.mu.Lock()
	err = s.services["ns/web"].err
	s.mu.Unlock()
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("open under a squatter: %v, want EADDRINUSE", err)
	}
	squatter.Close()
	freed := time.Now()
	waitFor(t, "health-check node port after the squatter left", func() bool {
		code, body, err := probe(port)
		return err == nil && code == 200 && strings.Contains(body, `"localEndpoints": 1`)
	})
	if took := time.Since(freed); took > retryMax+time.Second {
		t.Errorf("opened %v after the port was freed, want within the retry interval %v", took, retryMax)
	}
}

// The retry backoff: 1 s, doubling, at most 5 s.
func TestRetryDelay(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := retryDelay(i + 1); got != w {
			t.Errorf("attempt %d: %v, want %v", i+1, got, w)
		}
	}
}

// Two processes' Services (here two in one process, as the kernel sees
// the same user's sockets) share a health-check node port; once the old
// one shuts down the new one answers, and no probe in between fails.
// Within one Services, two services never share a port.
func TestServicesShareAcrossHandover(t *testing.T) {
	port := freePort(t)
	old := NewServices([]string{"127.0.0.1"}, nil, zerolog.Nop())
	defer old.Close()
	next := NewServices([]string{"127.0.0.1"}, nil, zerolog.Nop())
	defer next.Close()
	old.Upsert("ns/web:http/TCP", "ns", "web", port, 1)
	next.Upsert("ns/web:http/TCP", "ns", "web", port, 2)
	for _, s := range []*Services{old, next} {
		s.mu.Lock()
		err := s.services["ns/web"].err
		s.mu.Unlock()
		if err != nil {
			t.Fatalf("both processes open the port: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	old.Shutdown(ctx)
	for range 20 {
		code, body, err := probe(port)
		if err != nil || code != 200 || !strings.Contains(body, `"localEndpoints": 2`) {
			t.Fatalf("after the old one shut down: %d %q %v, want the new one's 200 with 2 local endpoints", code, body, err)
		}
	}
	old.Upsert("ns/other:http/TCP", "ns", "other", freePort(t), 1) // shut down: opens nothing
	old.mu.Lock()
	n := len(old.services["ns/other"].servers)
	old.mu.Unlock()
	if n != 0 {
		t.Errorf("a shut down Services opened %d servers", n)
	}

	next.Upsert("ns/dup:http/TCP", "ns", "dup", port, 1)
	next.mu.Lock()
	err := next.services["ns/dup"].err
	next.mu.Unlock()
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "held by ns/web") {
		t.Errorf("a second service on the same port: %v, want EADDRINUSE naming ns/web", err)
	}
}

// A request sent after Shutdown began, on a connection accepted before,
// is answered (net/http's own Shutdown closes such a connection
// unanswered: a probe that connected just before a hand-over would fail).
func TestServerShutdownAnswersAcceptedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "accepted connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.open == 1
	})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	}()
	waitFor(t, "Shutdown waiting for the connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.drained != nil
	})
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("a new connection was accepted after Shutdown began")
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("request on a connection accepted before Shutdown: %v, want an answer", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "ok" || !resp.Close {
		t.Errorf("answered %d %q (close %v), want 200 ok and the connection closed", resp.StatusCode, body, resp.Close)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return once its last connection closed")
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err after Shutdown: %v, want nil", err)
	}
}
