package metrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// ClientGo registers client-go's request metrics with kube-proxy's names
// (rest_client_requests_total, rest_client_request_duration_seconds).
// client-go holds one process-wide hook, so only the first call takes
// effect.
func (m *Metrics) ClientGo() {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
		Help: "API server requests by status code, method and host."}, []string{"code", "method", "host"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
		Help: "API server request latency by verb and host.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}, []string{"verb", "host"})
	m.Registry.MustRegister(requests, latency)
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  resultAdapter{requests},
		RequestLatency: latencyAdapter{latency},
	})
}

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}
