package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kproxy/kproxy/portal/datapath"
)

// Limits exports the process-wide bounds' use: connections and flows
// held, the bounds, and refusals at them.
func (m *Metrics) Limits(l *datapath.Limits) {
	if l == nil {
		return
	}
	gauge := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kproxy", Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	m.Registry.MustRegister(
		gauge("connections_active", "TCP connections proxied now, process-wide.", func() int64 { c, _, _, _ := l.Counts(); return c }),
		gauge("udp_flows_active", "UDP flows held now, process-wide.", func() int64 { _, f, _, _ := l.Counts(); return f }),
		gauge("connections_limit", "The process's TCP connection bound (--max-connections; 0: none).", func() int64 { return l.MaxConns }),
		gauge("udp_flows_limit", "The process's UDP flow bound (--max-udp-flows; 0: none).", func() int64 { return l.MaxFlows }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "kproxy", Name: "limit_refused_connections_total",
			Help: "TCP connections reset at a connection bound."}, func() float64 { _, _, r, _ := l.Counts(); return float64(r) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "kproxy", Name: "limit_refused_udp_flows_total",
			Help: "New UDP clients dropped at a flow bound."}, func() float64 { _, _, _, r := l.Counts(); return float64(r) }),
		gauge("splice_pipes_open", "Splice pipes (two fds each) open, in use or pooled, process-wide.", func() int64 { o, _ := datapath.PipeCounts(); return o }),
		gauge("splice_pipes_limit", "The process's splice pipe bound (a quarter of the connection bound; 0: none).", l.MaxPipes),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "kproxy", Name: "splice_pipe_misses_total",
			Help: "Bulk TCP chunks copied through memory because no splice pipe could be had (at the bound, or no fd left)."},
			func() float64 { _, m := datapath.PipeCounts(); return float64(m) }),
	)
}

// Reaper exports how many TCP connections were closed as idle.
func (m *Metrics) Reaper(r *datapath.IdleReaper) {
	if r == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "kproxy", Name: "tcp_idle_closed_total",
		Help: "Proxied TCP connections closed after --tcp-idle-timeout or --tcp-half-close-timeout without traffic."},
		func() float64 { return float64(r.Reaped.Load()) }))
}
