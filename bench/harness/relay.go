package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// The UDP relay is the bar a userspace UDP proxy is measured against:
// the least a Go program does to carry a datagram and its
// answer, one socket per listened address and one per client flow, no
// balancing, no actors, no limits. It runs as its own process
// (`kproxy-bench relay FILE`) so its CPU is read from /proc like the
// proxies'.

// writeRelayConfig writes "listen backend" lines: relay address i to
// backend i mod M's UDP echo.
func writeRelayConfig(dir string, n int, b *Backends) (string, error) {
	var c strings.Builder
	listen := serviceAddrs(relayNet, n, ModeUDP)
	to := directAddrs(b, n, ModeUDP)
	for i := range n {
		fmt.Fprintf(&c, "%s %s\n", listen[i], to[i])
	}
	path := filepath.Join(dir, "relay.conf")
	if err := os.WriteFile(path, []byte(c.String()), 0o644); err != nil {
		return "", fmt.Errorf("relay config: %w", err)
	}
	return path, nil
}

// startRelay runs the relay process on that config.
func startRelay(o *Options, dir string, n int, b *Backends) (*Proc, error) {
	cfg, err := writeRelayConfig(dir, n, b)
	if err != nil {
		return nil, err
	}
	return startProc("relay", filepath.Join(dir, "relay.log"), []string{o.Relay, "relay", cfg}, nil)
}

// ServeRelay relays datagrams as the config file says until ctx ends.
func ServeRelay(ctx context.Context, config string) error {
	f, err := os.Open(config)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer f.Close()
	var relays []*udpRelay
	defer func() {
		for _, r := range relays {
			r.close()
		}
	}()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		listen, backend, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		to, err := netip.ParseAddrPort(backend)
		if err != nil {
			return fmt.Errorf("relay: backend %q: %w", backend, err)
		}
		r, err := listenRelay(listen, to)
		if err != nil {
			return err
		}
		relays = append(relays, r)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	<-ctx.Done()
	return nil
}

// udpRelay is one listened address: a flow (a connected socket to the
// backend) per client address, answers written back from the listener.
type udpRelay struct {
	ln    *net.UDPConn
	to    netip.AddrPort
	mu    sync.Mutex
	flows map[netip.AddrPort]*net.UDPConn
	wg    sync.WaitGroup
}

func listenRelay(addr string, to netip.AddrPort) (*udpRelay, error) {
	ln, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r := &udpRelay{ln: ln, to: to, flows: map[netip.AddrPort]*net.UDPConn{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *udpRelay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		flow, err := r.flow(from)
		if err != nil {
			continue // the datagram is dropped, as a proxy out of sockets would
		}
		flow.Write(buf[:n])
	}
}

// flow is the client's socket towards the backend, made at its first
// datagram; its goroutine carries the answers back.
func (r *udpRelay) flow(client netip.AddrPort) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.flows[client]; c != nil {
		return c, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.to))
	if err != nil {
		return nil, err
	}
	r.flows[client] = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			r.ln.WriteToUDPAddrPort(buf[:n], client)
		}
	}()
	return c, nil
}

func (r *udpRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.flows {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
