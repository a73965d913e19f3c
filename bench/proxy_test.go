// Package bench measures kproxy against a direct connection in the same
// run: each benchmark alternates direct and proxied rounds and reports
// proxy/direct ratios, so machine noise hits both sides alike.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/bench/backends"
	"github.com/kproxy/kproxy/messages"
)

// proxyTo starts kproxy with one TCP service port forwarding to backend and
// returns the service address.
func proxyTo(b *testing.B, backend string) string {
	b.Helper()
	p := actors.Start(actors.Config{BindAddress: "127.0.0.1", Log: zerolog.Nop()})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	host, port, _ := net.SplitHostPort(backend)
	pn, _ := strconv.Atoi(port)
	key := &messages.ServicePortKey{Namespace: "bench", Name: "svc", PortName: "tcp", Protocol: messages.Protocol_TCP}
	ready := make(chan string, 1)
	unsub := p.Subscribe(func(st *messages.ServicePortState) {
		if len(st.GetListenAddresses()) == 2 {
			select {
			case ready <- "127.0.50.1:18080":
			default:
			}
		}
	})
	defer unsub()
	p.Submit(&messages.SourceSnapshot{Source: "bench", Generation: 1, ServicePorts: []*messages.ServicePortEndpoints{{
		ServicePort: &messages.ServicePort{Key: key, Type: "ClusterIP", Port: 18080, TargetPort: int32(pn),
			ClusterIps: &messages.IPSet{V4: []string{"127.0.50.1"}}},
		Endpoints: []*messages.Endpoint{{Ips: []string{host}, Port: int32(pn), Ready: true, Serving: true, Internal: true, External: true}},
	}}})
	select {
	case addr := <-ready:
		return addr
	case <-time.After(10 * time.Second):
		b.Fatal("service port never listened")
		return ""
	}
}

// BenchmarkTCPThroughput sends 256 MiB per round over one connection,
// directly to a sink and through kproxy, and reports both rates and their
// ratio (proxy/direct).
func BenchmarkTCPThroughput(b *testing.B) {
	const size = 256 << 20
	sink, err := backends.StartSink("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	proxied := proxyTo(b, sink.Addr())
	buf := make([]byte, 256*1024)
	send := func(addr string) time.Duration {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		// Close the write side and wait for the far end to close, so the
		// time covers delivery, not just buffering.
		c.(*net.TCPConn).CloseWrite()
		c.Read(make([]byte, 1))
		return time.Since(start)
	}
	send(sink.Addr()) // warm up both paths
	send(proxied)
	var direct, proxy time.Duration
	b.ResetTimer()
	for range b.N {
		direct += send(sink.Addr())
		proxy += send(proxied)
	}
	mb := float64(size) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/direct.Seconds(), "direct-MiB/s")
	b.ReportMetric(mb/proxy.Seconds(), "proxy-MiB/s")
	b.ReportMetric(direct.Seconds()/proxy.Seconds(), "ratio")
}

// BenchmarkTCPConnectionRate opens, uses (one reply line) and closes 2,000
// connections per round from 8 concurrent clients, directly and through
// kproxy, and reports connections/s and their ratio (proxy/direct).
func BenchmarkTCPConnectionRate(b *testing.B) {
	const conns, clients = 2000, 8
	backend, err := backends.StartTCP("b", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	runRate(b, backend.Addr(), proxyTo(b, backend.Addr()))
}

func runRate(b *testing.B, direct, proxied string) {
	const conns, clients = 2000, 8
	round := func(addr string) time.Duration {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range conns / clients {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						errs <- err
						return
					}
					_, err = backends.ReadName(bufio.NewReader(c))
					c.Close()
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(fmt.Errorf("%s: %w", addr, err))
		}
		return d
	}
	round(direct)
	round(proxied)
	var directT, proxyT time.Duration
	b.ResetTimer()
	for range b.N {
		directT += round(direct)
		proxyT += round(proxied)
	}
	n := float64(conns * b.N)
	b.ReportMetric(n/directT.Seconds(), "direct-conn/s")
	b.ReportMetric(n/proxyT.Seconds(), "proxy-conn/s")
	b.ReportMetric(directT.Seconds()/proxyT.Seconds(), "ratio")
}
