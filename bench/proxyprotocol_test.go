package bench

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
)

// BenchmarkProxyProtocolConnection measures one proxied connection through
// kproxy (bind portal, loopback) without and with a PROXY header (v1, v2):
// the client connects, reads the endpoint's one-line greeting and closes.
// The endpoint greets, then discards what it reads (the header included),
// the same in every case, so the difference is the header's cost.
func BenchmarkProxyProtocolConnection(b *testing.B) {
	endpoint, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer endpoint.Close()
	go func() {
		for {
			c, err := endpoint.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("ok\n"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	for i, tc := range []struct {
		name string
		pp   messages.ProxyProtocol
	}{{"plain", messages.ProxyProtocol_PROXY_PROTOCOL_NONE}, {"v1", messages.ProxyProtocol_PROXY_PROTOCOL_V1}, {"v2", messages.ProxyProtocol_PROXY_PROTOCOL_V2}} {
		addr := kproxyOn(b, actors.Config{BindAddress: "127.0.0.1", Log: zerolog.Nop()}, net.IPv4(127, 0, 51, byte(1+i)).String(),
			endpoint.Addr().String(), func(sp *messages.ServicePort) { sp.ProxyProtocol = tc.pp })
		b.Run(tc.name, func(b *testing.B) {
			one := func() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
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
