package bench

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
)

// BenchmarkPortalRestart crashes one service port's Portal b.N times and
// reports the time from the crash request to the restarted Portal serving
// its listeners again (p50, p99).
func BenchmarkPortalRestart(b *testing.B) {
	backend, err := backends.StartTCP("b", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	p, serve := startProxy(actors.Config{BindAddress: "127.0.0.1", Log: zerolog.Nop()})
	defer p.Stop(context.Background())
	states := make(chan *messages.ServicePortState, 1024)
	defer p.Subscribe(func(st *messages.ServicePortState) { states <- st })()
	host, port, _ := net.SplitHostPort(backend.Addr())
	pn, _ := strconv.Atoi(port)
	key := &messages.ServicePortKey{Namespace: "bench", Name: "restart", PortName: "tcp", Protocol: messages.Protocol_TCP}
	serve(&messages.ServicePortEndpoints{
		ServicePort: &messages.ServicePort{Key: key, Port: 18080, ClusterIps: &messages.IPSet{V4: []string{"127.0.51.1"}}},
		Endpoints:   []*messages.Endpoint{{Ips: []string{host}, Port: int32(pn), Internal: true, External: true}},
	})
	await := func(ok func(*messages.ServicePortState) bool) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case st := <-states:
				if ok(st) {
					return
				}
			case <-timeout:
				b.Fatal("timed out")
			}
		}
	}
	// The bind portal listens on the service address itself, one socket.
	serving := func(st *messages.ServicePortState) bool {
		return slices.Equal(st.GetListenAddresses(), []string{"127.0.51.1:18080"})
	}
	await(serving)
	var took []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		start := time.Now()
		if err := p.Crash(key.ID(), "portal", "bench"); err != nil {
			b.Fatal(err)
		}
		await(func(st *messages.ServicePortState) bool {
			return st.GetRestarts() == int32(i) && serving(st)
		})
		took = append(took, time.Since(start))
		// Stay under the supervisor's burst so no restart is delayed on purpose.
		time.Sleep(60 * time.Millisecond)
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[(len(took)-1)*99/100].Microseconds()), "p99-µs")
}
