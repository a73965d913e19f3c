//go:build unix

package backends

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SlowAccept is a single-threaded request/response server with a short
// accept queue, as many small servers are (Python's http.server listens
// with a backlog of 5): it answers one connection at a time, "ok\n" to a
// line, and every PauseEvery-th answer takes Pause (a slow request).
// Meanwhile clients fill its accept queue and the kernel drops the SYNs
// beyond it; their kernels retransmit them after 1 s.
type SlowAccept struct {
	ln   net.Listener
	done chan struct{}
}

// StartSlowAccept listens on addr ("127.0.0.1:0") with listen(2)'s
// backlog set to backlog.
func StartSlowAccept(addr string, backlog, pauseEvery int, pause time.Duration) (*SlowAccept, error) {
	// By hand: Go's Listen always asks for the system's largest backlog.
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return nil, fmt.Errorf("slow-accept backend %s: an IPv4 address", addr)
	}
	var p int
	fmt.Sscan(port, &p)
	syscall.ForkLock.RLock() // close-on-exec before any fork sees it (no SOCK_CLOEXEC on every unix)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "slow-accept")
	defer f.Close() // the listener holds a descriptor of its own
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte(ip), Port: p}); err != nil {
		return nil, fmt.Errorf("slow-accept backend %s: %w", addr, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return nil, fmt.Errorf("slow-accept backend %s: %w", addr, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("slow-accept backend %s: %w", addr, err)
	}
	b := &SlowAccept{ln: ln, done: make(chan struct{})}
	go b.serve(pauseEvery, pause)
	return b, nil
}

func (b *SlowAccept) serve(pauseEvery int, pause time.Duration) {
	defer close(b.done)
	for n := 1; ; n++ {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			if pauseEvery > 0 && n%pauseEvery == 0 {
				time.Sleep(pause) // the slow request: nothing is accepted meanwhile
			}
			io.WriteString(c, "ok\n")
		}
		c.Close()
	}
}

// Addr is the backend's "ip:port".
func (b *SlowAccept) Addr() string { return b.ln.Addr().String() }

// Port is the backend's port.
func (b *SlowAccept) Port() int { return b.ln.Addr().(*net.TCPAddr).Port }

// Close stops the backend.
func (b *SlowAccept) Close() {
	b.ln.Close()
	<-b.done
}

// Requests makes n connection-per-request round trips ("GET\n", then
// read to the end, which must be "ok\n") to addr from c concurrent
// clients, within limit. It returns how many were made, how many failed
// (connect, write or read errors, a wrong answer) and the first error.
func Requests(ctx context.Context, addr string, n, c int, limit time.Duration) (made, failed int64, first error) {
	var d net.Dialer
	return RequestsVia(ctx, d.DialContext, addr, n, c, limit)
}

// RequestsVia is Requests with each connection made by dial (one that
// dials from inside a network namespace, say).
func RequestsVia(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string, n, c int, limit time.Duration) (made, failed int64, first error) {
	var next, bad atomic.Int64
	var once sync.Once
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if next.Add(1) > int64(n) {
					next.Add(-1)
					return
				}
				if err := request(dial, addr); err != nil {
					bad.Add(1)
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	return next.Load(), bad.Load(), first
}

// requestTimeout is how long one round trip may take: as long as the
// kernel itself keeps a connection to a full accept queue alive. When the
// queue is full the server's kernel drops the handshake's last ACK, so the
// client's connect succeeds while the server sits in SYN_RECV, resending
// its SYN-ACK after 1, 2, 4, 8 and 16 s (tcp_synack_retries, 5) before it
// gives up at 63 s; a shorter deadline fails requests the kernel would
// still have served, through a proxy or not.
const requestTimeout = 65 * time.Second

// request is one round trip; the time limit stops new ones, not this.
func request(dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := io.WriteString(c, "GET\n"); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err == nil && string(got) != "ok\n" {
		err = fmt.Errorf("answer %q: reset or closed before the endpoint answered", got)
	}
	return err
}
