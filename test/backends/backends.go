package backends

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// TCP is a backend that writes "name\n" on every connection, then echoes
// what it reads until EOF, then closes its write side (so half-close through
// a proxy is observable).
type TCP struct {
	Name string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// listenConfig makes the backends' listeners: no TCP keepalive on the
// connections they accept (Go turns it on by default, three setsockopts
// per connection), which a benchmark's clients would otherwise pay for
// in every connection the backend accepts, whatever the proxy.
var listenConfig = net.ListenConfig{KeepAlive: -1}

// StartTCP listens on addr ("127.0.0.1:0" for any port).
func StartTCP(name, addr string) (*TCP, error) {
	ln, err := listenConfig.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &TCP{Name: name, ln: ln, open: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is the backend's "ip:port".
func (b *TCP) Addr() string { return b.ln.Addr().String() }

// Port is the backend's port.
func (b *TCP) Port() int { return b.ln.Addr().(*net.TCPAddr).Port }

func (b *TCP) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // fd exhaustion and the like: the listener is still good
			continue
		}
		b.mu.Lock()
		b.open[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() {
				b.mu.Lock()
				delete(b.open, c)
				b.mu.Unlock()
				c.Close()
			}()
			if _, err := io.WriteString(c, b.Name+"\n"); err != nil {
				return
			}
			io.Copy(c, c)
			c.(*net.TCPConn).CloseWrite()
		}()
	}
}

// Close stops the backend and its connections.
func (b *TCP) Close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// ReadName reads the first line a TCP backend sends.
func ReadName(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

// udpReadBuffer is the UDP echo's socket receive buffer.
const udpReadBuffer = 4 << 20

// UDP is a backend that answers each datagram with "name:" + the datagram;
// a datagram "delay D ..." (D a time.Duration) is answered after D, as a
// DNS server answers what it had to ask upstream.
type UDP struct {
	Name string
	conn *net.UDPConn
	done chan struct{}
}

// StartUDP listens on addr.
func StartUDP(name, addr string) (*UDP, error) {
	a, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", a)
	if err != nil {
		return nil, err
	}
	// Every client's datagrams meet here: room for bursts (the kernel caps
	// it at net.core.rmem_max).
	conn.SetReadBuffer(udpReadBuffer)
	b := &UDP{Name: name, conn: conn, done: make(chan struct{})}
	go b.serve()
	return b, nil
}

// Addr is the backend's "ip:port".
func (b *UDP) Addr() string { return b.conn.LocalAddr().String() }

// Port is the backend's port.
func (b *UDP) Port() int { return b.conn.LocalAddr().(*net.UDPAddr).Port }

func (b *UDP) serve() {
	defer close(b.done)
	buf := make([]byte, 64*1024)
	prefix := []byte(b.Name + ":")
	out := make([]byte, 0, len(prefix)+len(buf))
	for {
		n, from, err := b.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if d, ok := answerDelay(buf[:n]); ok {
			answer := append(append([]byte{}, prefix...), buf[:n]...)
			time.AfterFunc(d, func() { b.conn.WriteToUDPAddrPort(answer, from) })
			continue
		}
		out = append(append(out[:0], prefix...), buf[:n]...)
		b.conn.WriteToUDPAddrPort(out, from)
	}
}

// answerDelay is the delay a datagram "delay D ..." asks for.
func answerDelay(b []byte) (time.Duration, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("delay "))
	if !ok {
		return 0, false
	}
	d, _, _ := bytes.Cut(rest, []byte(" "))
	delay, err := time.ParseDuration(string(d))
	return delay, err == nil && delay > 0 && delay <= time.Minute
}

// Close stops the backend.
func (b *UDP) Close() {
	b.conn.Close()
	<-b.done
}

// Sink is a TCP backend that reads and discards everything (bulk throughput).
type Sink struct {
	ln net.Listener
	wg sync.WaitGroup
}

// StartSink listens on addr.
func StartSink(addr string) (*Sink, error) {
	ln, err := listenConfig.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Sink{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				// A large buffer so the sink is never the bottleneck.
				buf := make([]byte, 256*1024)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s, nil
}

// Addr is the sink's "ip:port".
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Port is the sink's port.
func (s *Sink) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting; open connections end when their clients close.
func (s *Sink) Close() {
	s.ln.Close()
	s.wg.Wait()
}
