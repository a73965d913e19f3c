package bench

import (
	"net"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/bench/backends"
	"github.com/kproxy/kproxy/portal"
)

func BenchmarkBareConnRate(b *testing.B) {
	backend, _ := backends.StartTCP("b", "127.0.0.1:0")
	defer backend.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	p := &portal.TCPProxy{Picker: portal.PickerFunc(func(string, []string, bool) (string, error) { return backend.Addr(), nil }), Log: zerolog.Nop()}
	go p.Serve(ln.(*net.TCPListener))
	runRate(b, backend.Addr(), ln.Addr().String())
}
