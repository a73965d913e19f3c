package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingFlags configure OpenTelemetry tracing as Kubernetes components'
// TracingConfiguration does: an OTLP gRPC endpoint and a sampling rate
// per million. Off unless an endpoint is given.
type tracingFlags struct {
	endpoint               string
	samplingRatePerMillion int
}

// defaultSamplingRatePerMillion samples 1% of connections; changes and
// crashes are always traced (they are few: one trace per coalesced change
// of a service, one per crash).
const defaultSamplingRatePerMillion = 10000

func (f *tracingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "tracing-endpoint", "", "OTLP gRPC endpoint (host:port, plaintext; usually a node-local OpenTelemetry Collector or Jaeger) to send traces to; empty turns tracing off")
	fs.IntVar(&f.samplingRatePerMillion, "tracing-sampling-rate-per-million", defaultSamplingRatePerMillion, "connections traced per million (0-1000000); every applied change and every actor crash is traced")
}

func (f *tracingFlags) validate() error {
	if f.samplingRatePerMillion < 0 || f.samplingRatePerMillion > 1_000_000 {
		return fmt.Errorf("--tracing-sampling-rate-per-million %d: want 0 to 1000000", f.samplingRatePerMillion)
	}
	if f.endpoint != "" {
		if _, _, err := net.SplitHostPort(f.endpoint); err != nil {
			return fmt.Errorf("--tracing-endpoint %q: %w", f.endpoint, err)
		}
	}
	return nil
}

// start sets up the tracer provider: OTLP over gRPC through a batching
// processor, whose bounded queue drops spans rather than grow when the
// backend is slow or away. It returns nil (tracing off) without an
// endpoint, and a shutdown that flushes what is queued.
func (f *tracingFlags) start(ctx context.Context, nodeName string, log zerolog.Logger) (trace.Tracer, func(context.Context), error) {
	if f.endpoint == "" {
		return nil, func(context.Context) {}, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(f.endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing exporter for %s: %w", f.endpoint, err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "kproxy"),
		attribute.String("service.version", version),
		attribute.String("host.name", nodeName),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(connectionSampler(f.samplingRatePerMillion)),
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Debug().Err(err).Msg("tracing export failed")
	}))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info().Str("endpoint", f.endpoint).Int("connectionsPerMillion", f.samplingRatePerMillion).Msg("tracing on")
	shutdown := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("flushing traces")
		}
	}
	return tp.Tracer("github.com/kproxy/kproxy"), shutdown, nil
}

// connectionSampler samples new connection traces at perMillion and
// every other new trace (changes, crashes); a span with a parent follows
// its parent's decision.
func connectionSampler(perMillion int) sdktrace.Sampler {
	return sdktrace.ParentBased(rootSampler{connections: sdktrace.TraceIDRatioBased(float64(perMillion) / 1e6)})
}

type rootSampler struct{ connections sdktrace.Sampler }

func (s rootSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == "connection" {
		return s.connections.ShouldSample(p)
	}
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (s rootSampler) Description() string {
	return "kproxy{connections:" + s.connections.Description() + ",others:AlwaysOn}"
}
