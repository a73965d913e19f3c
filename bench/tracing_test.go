//go:build unix

package bench

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/test/backends"
)

// BenchmarkTracingConnectionRate measures what tracing costs on the data
// path: the connection-rate round through three kproxy trees in one run,
// interleaved: tracing off, on with 1% of connections sampled (the
// default), and on with every connection traced. Spans go through the
// SDK's batching processor to an exporter that discards them, so what is
// measured is kproxy's side (a backend's cost is its own). Reported:
// connections/s and process CPU µs per connection, each traced tree as a
// ratio to the untraced one.
func BenchmarkTracingConnectionRate(b *testing.B) {
	const conns, clients = 2000, 8
	backend, err := backends.StartTCP("b", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	traced := func(ratio float64) actors.Config {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		return actors.Config{BindAddress: "127.0.0.1", Log: zerolog.Nop(), Tracer: tp.Tracer("bench")}
	}
	addrs := []string{
		kproxyOn(b, actors.Config{BindAddress: "127.0.0.1", Log: zerolog.Nop()}, "127.0.51.1", backend.Addr()),
		kproxyOn(b, traced(0.01), "127.0.51.2", backend.Addr()),
		kproxyOn(b, traced(1), "127.0.51.3", backend.Addr()),
	}
	for _, a := range addrs {
		connectionRound(b, a, conns, clients) // warm-up
	}
	var took, cpu [3]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, a := range addrs {
			before := processCPU()
			took[i] += connectionRound(b, a, conns, clients)
			cpu[i] += processCPU() - before
		}
	}
	b.StopTimer()
	n := float64(conns * b.N)
	rate := func(i int) float64 { return n / took[i].Seconds() }
	perConn := func(i int) float64 { return float64(cpu[i].Microseconds()) / n }
	b.ReportMetric(rate(0), "off-conn/s")
	b.ReportMetric(perConn(0), "off-cpu-µs/conn")
	b.ReportMetric(rate(1)/rate(0), "1%/off-conn/s")
	b.ReportMetric(perConn(1)/perConn(0), "1%/off-cpu")
	b.ReportMetric(rate(2)/rate(0), "100%/off-conn/s")
	b.ReportMetric(perConn(2)/perConn(0), "100%/off-cpu")
}

// processCPU is this process's user and system CPU time so far (clients,
// backend and proxies alike: the trees differ only in tracing).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
