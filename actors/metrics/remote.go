package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RemoteStats is a backend's view of its core (remote.Source).
type RemoteStats interface {
	// RemoteStats reports whether the core is heard from now, and the
	// snapshots, deltas and re-subscriptions so far.
	RemoteStats() (connected bool, snapshots, deltas, resubscribes int64)
}

// Remote exports a backend's link to its core (--source remote:ADDR) and
// returns what observes each delivery's latency (from the core's send to
// its application here).
func (m *Metrics) Remote(s RemoteStats) (delivered func(sent time.Time)) {
	get := func(i int) func() float64 {
		return func() float64 {
			c, sn, d, r := s.RemoteStats()
			switch i {
			case 0:
				if c {
					return 1
				}
				return 0
			case 1:
				return float64(sn)
			case 2:
				return float64(d)
			}
			return float64(r)
		}
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Subsystem: "kproxy", Name: "remote_core_connected",
			Help: "1 while the core (--source remote:ADDR) is heard from, 0 while it is lost (the last state keeps serving)."}, get(0)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "remote_snapshots_total",
			Help: "Full snapshots applied from the core (subscriptions and resyncs)."}, get(1)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "remote_deltas_total",
			Help: "Deltas applied from the core."}, get(2)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Subsystem: "kproxy", Name: "remote_resubscribes_total",
			Help: "Times the core was lost or out of step and this backend subscribed again."}, get(3)),
	)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "kproxy", Name: "remote_delivery_duration_seconds",
		Help: "From the core sending a snapshot or delta to this backend applying it.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.Registry.MustRegister(h)
	return func(sent time.Time) { h.Observe(time.Since(sent).Seconds()) }
}
