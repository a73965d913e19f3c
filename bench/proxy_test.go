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

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/test/backends"
)

// kproxyTo starts kproxy with one TCP service port forwarding to backend and
// returns the service address.
func kproxyTo(b *testing.B, backend string) string {
	b.Helper()
	return kproxyOn(b, actors.Config{BindAddress: "127.0.0.1", TCPEventLoops: datapath.EventLoopsSupported}, "127.0.50.1", backend)
}

// kproxyOn starts a kproxy tree with cfg and one TCP service port on
// serviceIP:18080 forwarding to backend, and returns the service address.
// mutate, if any, changes the service port before it is served.
func kproxyOn(b *testing.B, cfg actors.Config, serviceIP, backend string, mutate ...func(*messages.ServicePort)) string {
	b.Helper()
	p, serve := startProxy(cfg)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	host, port, _ := net.SplitHostPort(backend)
	pn, _ := strconv.Atoi(port)
	key := &messages.ServicePortKey{Namespace: "bench", Name: "svc", PortName: "tcp", Protocol: messages.Protocol_TCP}
	ready := make(chan struct{}, 1)
	unsub := p.Subscribe(func(st *messages.ServicePortState) {
		if len(st.GetListenAddresses()) > 0 { // bind mode: the cluster IP alone
			select {
			case ready <- struct{}{}:
			default:
			}
		}
	})
	defer unsub()
	sp := &messages.ServicePort{Key: key, Type: "ClusterIP", Port: 18080, TargetPort: int32(pn),
		ClusterIps: &messages.IPSet{V4: []string{serviceIP}}}
	for _, m := range mutate {
		m(sp)
	}
	serve(&messages.ServicePortEndpoints{
		ServicePort: sp,
		Endpoints:   []*messages.Endpoint{{Ips: []string{host}, Port: int32(pn), Ready: true, Serving: true, Internal: true, External: true}},
	})
	select {
	case <-ready:
		return net.JoinHostPort(serviceIP, "18080")
	case <-time.After(10 * time.Second):
		b.Fatal("service port never listened")
		return ""
	}
}

// bareTo starts the bare baseline: datapath.TCPProxy on a loopback listener,
// always picking backend.
func bareTo(b *testing.B, backend string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	p := &datapath.TCPProxy{Picker: datapath.PickerFunc(func(string, []string, bool) (string, error) { return backend, nil })}
	go p.Serve(ln.(*net.TCPListener), nil)
	return ln.Addr().String()
}

// compare runs warm-up and b.N rounds of round against direct, bare and
// kproxy addresses, and reports per-second rates and ratios.
func compare(b *testing.B, unit string, perRound float64, direct, bare, kproxy string, round func(addr string) time.Duration) {
	addrs := []string{direct, bare, kproxy}
	for _, a := range addrs {
		round(a)
	}
	var took [3]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, a := range addrs {
			took[i] += round(a)
		}
	}
	b.StopTimer()
	n := perRound * float64(b.N)
	rate := func(i int) float64 { return n / took[i].Seconds() }
	b.ReportMetric(rate(0), "direct-"+unit)
	b.ReportMetric(rate(1), "bare-"+unit)
	b.ReportMetric(rate(2), "kproxy-"+unit)
	b.ReportMetric(rate(2)/rate(0), "kproxy/direct")
	b.ReportMetric(rate(1)/rate(0), "bare/direct")
}

// BenchmarkTCPThroughput sends 256 MiB per round over one connection.
func BenchmarkTCPThroughput(b *testing.B) {
	const size = 256 << 20
	sink, err := backends.StartSink("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	buf := make([]byte, 256*1024)
	compare(b, "MiB/s", size/(1<<20), sink.Addr(), bareTo(b, sink.Addr()), kproxyTo(b, sink.Addr()), func(addr string) time.Duration {
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
		// Half-close and wait for the far end to close, so the time covers
		// delivery, not just buffering.
		c.(*net.TCPConn).CloseWrite()
		c.Read(make([]byte, 1))
		return time.Since(start)
	})
}

// BenchmarkTCPConnectionRate opens, uses (one reply line) and closes 2,000
// connections per round from 8 concurrent clients.
func BenchmarkTCPConnectionRate(b *testing.B) {
	const conns, clients = 2000, 8
	backend, err := backends.StartTCP("b", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	compare(b, "conn/s", conns, backend.Addr(), bareTo(b, backend.Addr()), kproxyTo(b, backend.Addr()), func(addr string) time.Duration {
		return connectionRound(b, addr, conns, clients)
	})
}

// connectionRound opens, uses (one reply line) and closes conns
// connections from clients concurrent clients, and returns how long it took.
func connectionRound(b *testing.B, addr string, conns, clients int) time.Duration {
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
