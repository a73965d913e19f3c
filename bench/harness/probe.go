package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// readiness is, per address, when it first accepted a connection and when
// it first forwarded one to a backend, measured from start.
type readiness struct {
	Listen, Forward []time.Duration
}

// probeWorkers dial that many addresses at once: enough that probing
// thousands of ready ports takes a fraction of a second.
const probeWorkers = 128

// retryPause is how long a probe waits before dialing a port that did
// not answer again. The proxy is another process that announces nothing
// per port, so polling is the only way to see a port come up; the pause
// bounds the probes' load and is the measurement's resolution.
const retryPause = 5 * time.Millisecond

// awaitForwarding probes every address until it forwards (a TCP client
// reads the backend's name; a UDP one gets its echo), or fails when the
// process exits, ctx ends or limit passes. With order (every index of
// addrs once, as each begins to listen), an address is probed once it
// listens, in the order they come up: no probe loads the proxy by dialing
// ports that are not open yet, and none waits on a port still closed while
// others are up. Without it, addresses are probed in turn.
func awaitForwarding(ctx context.Context, p *Proc, addrs []string, mode string, start time.Time, limit time.Duration, order <-chan int) (*readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if p != nil {
		go func() {
			select {
			case <-p.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	r := &readiness{Listen: make([]time.Duration, len(addrs)), Forward: make([]time.Duration, len(addrs))}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(probeWorkers, len(addrs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				listen, forward, ok := probeUntil(ctx, addrs[i], mode, start)
				if !ok {
					return
				}
				r.Listen[i], r.Forward[i] = listen, forward
			}
		}()
	}
feed:
	for k := range addrs {
		i := k
		if order != nil {
			select {
			case i = <-order:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if p != nil {
		select {
		case <-p.Done():
			return nil, p.exitError()
		default:
		}
	}
	if err := ctx.Err(); err != nil {
		forwarding := 0
		for _, f := range r.Forward {
			if f > 0 {
				forwarding++
			}
		}
		return r, fmt.Errorf("%d of %d ports forwarding after %v: %w", forwarding, len(addrs), time.Since(start).Round(time.Millisecond), err)
	}
	return r, nil
}

// probeDialer makes a probe's connection: no TCP keepalive, which a
// connection this short never uses and which costs three setsockopts
// per dial (Go's default turns it on).
var probeDialer = net.Dialer{Timeout: time.Second, KeepAlive: -1}

// probeUntil dials addr until it forwards; ok is false when ctx ended first.
func probeUntil(ctx context.Context, addr string, mode string, start time.Time) (listen, forward time.Duration, ok bool) {
	for {
		accepted, forwarded := probeOnce(addr, mode)
		if accepted && listen == 0 {
			listen = time.Since(start)
		}
		if forwarded {
			return listen, time.Since(start), true
		}
		select {
		case <-ctx.Done():
			return 0, 0, false
		case <-time.After(retryPause):
		}
	}
}

// probeOnce makes one connection (or one datagram exchange). A sink
// (bulk) says nothing: a connection it accepts is all a probe sees. An
// HTTP server (close) answers one request.
func probeOnce(addr string, mode string) (accepted, forwarded bool) {
	if mode == ModeUDP {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return false, false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write([]byte("probe")); err != nil {
			return false, false
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		ok := err == nil && n > 0
		return ok, ok
	}
	c, err := probeDialer.Dial("tcp", addr)
	if err != nil {
		return false, false
	}
	defer c.Close()
	if mode == ModeBulk {
		return true, true
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if mode == ModeClose { // an HTTP server says nothing until asked
		return true, closeExchange(c, make([]byte, 4096)) == nil
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return true, err == nil
}
