package bench

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/test/backends"
)

// BenchmarkTCPConnectionAllocs measures what one proxied connection costs
// in allocations (run with -benchmem): a client connects, reads the
// backend's name line, sends 64 bytes, reads their echo and closes, one
// connection after another. Everything runs in this process, so the
// "direct" case gives the client's and backend's own share; kproxy's and
// the bare splice proxy's allocations per connection are theirs minus
// direct's. kproxy runs as `kproxy run` does (TCP on the event loops
// where they exist); kproxy-goroutines on the goroutine data path.
func BenchmarkTCPConnectionAllocs(b *testing.B) {
	backend, err := backends.StartTCP("b", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	targets := []struct{ name, addr string }{
		{"direct", backend.Addr()},
		{"bare", bareTo(b, backend.Addr())},
		{"kproxy", kproxyTo(b, backend.Addr())},
		{"kproxy-goroutines", kproxyOn(b, actors.Config{BindAddress: "127.0.0.1"}, "127.0.50.2", backend.Addr())},
	}
	msg := make([]byte, 64)
	for _, t := range targets {
		b.Run(t.name, func(b *testing.B) {
			buf := make([]byte, 64)
			one := func() {
				c, err := net.Dial("tcp", t.addr)
				if err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReader(c)
				if _, err := backends.ReadName(r); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			for range 100 { // warm pools and the balancer
				one()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				one()
			}
		})
	}
}
