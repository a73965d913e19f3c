package metrics

import (
	"fmt"

	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MeterProvider returns an OpenTelemetry meter provider whose metrics land
// in the registry: protoactor reports its actor metrics (mailbox length,
// spawns, restarts, message latency) through one.
func (m *Metrics) MeterProvider() (metric.MeterProvider, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(m.Registry))
	if err != nil {
		return nil, fmt.Errorf("bridge OpenTelemetry metrics to Prometheus: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}
