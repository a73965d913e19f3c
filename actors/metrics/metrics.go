package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// kube-proxy's subsystem: its metrics are kubeproxy_*.
const kubeProxySubsystem = "kubeproxy"

// Metrics holds the registry and the metrics the actors update.
type Metrics struct {
	Registry *prometheus.Registry

	syncDuration        prometheus.Histogram
	syncFullDuration    prometheus.Histogram
	syncPartialDuration prometheus.Histogram
	lastSync            prometheus.Gauge
	lastQueued          prometheus.Gauge
	networkProgramming  prometheus.Histogram
	serviceChanges      prometheus.Counter
	servicePending      prometheus.Gauge
	endpointChanges     prometheus.Counter
	endpointPending     prometheus.Gauge
	healthz, livez      *prometheus.CounterVec
	portalRules         prometheus.Gauge
	noLocalEndpoints    *prometheus.GaugeVec
	restarts            *prometheus.CounterVec
	faults              *prometheus.CounterVec
	ejections           prometheus.Counter
}

// kube-proxy's buckets for sync durations (1 ms to ~16 s).
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// New returns the metrics, registered with process and Go collectors in a
// registry of their own.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Metrics{Registry: reg}
	kp := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Subsystem: kubeProxySubsystem, Name: name, Help: help}
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		o := kp(name, help)
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets})
		f(h)
		return h
	}
	gauge := func(o prometheus.Opts) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts(o))
		f(g)
		return g
	}
	counter := func(o prometheus.Opts) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts(o))
		f(c)
		return c
	}
	m.syncDuration = hist("sync_proxy_rules_duration_seconds", "How long a change took to apply: a kernel rules transaction, or in bind mode the Watcher's flush to the service ports.", syncBuckets)
	m.syncFullDuration = hist("sync_full_proxy_rules_duration_seconds", "How long a full sync of the kernel rules took.", syncBuckets)
	m.syncPartialDuration = hist("sync_partial_proxy_rules_duration_seconds", "How long a partial (incremental) sync took.", syncBuckets)
	m.lastSync = gauge(kp("sync_proxy_rules_last_timestamp_seconds", "When changes were last applied successfully (Unix seconds)."))
	m.lastQueued = gauge(kp("sync_proxy_rules_last_queued_timestamp_seconds", "When a change was last queued (Unix seconds)."))
	m.networkProgramming = hist("network_programming_duration_seconds",
		"From an EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time to the change being applied here.",
		prometheus.ExponentialBuckets(0.001, 2, 20))
	m.serviceChanges = counter(kp("sync_proxy_rules_service_changes_total", "Service changes seen."))
	m.servicePending = gauge(kp("sync_proxy_rules_service_changes_pending", "Service changes not applied yet."))
	m.endpointChanges = counter(kp("sync_proxy_rules_endpoint_changes_total", "EndpointSlice changes seen."))
	m.endpointPending = gauge(kp("sync_proxy_rules_endpoint_changes_pending", "EndpointSlice changes not applied yet."))
	m.healthz = prometheus.NewCounterVec(prometheus.CounterOpts(kp("proxy_healthz_total", "/healthz answers by code.")), []string{"code"})
	m.livez = prometheus.NewCounterVec(prometheus.CounterOpts(kp("proxy_livez_total", "/livez answers by code.")), []string{"code"})
	f(m.healthz)
	f(m.livez)
	m.noLocalEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts(kp("sync_proxy_rules_no_local_endpoints_total",
		"Service ports whose Local traffic policy leaves a scope without endpoints while the service has some elsewhere: that traffic is dropped.")), []string{"traffic_policy"})
	f(m.noLocalEndpoints)
	m.portalRules = gauge(prometheus.Opts{Namespace: "kproxy", Name: "portal_rules", Help: "Kernel portal rules programmed (one per service IP or node port)."})
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kproxy", Name: "actor_restarts_total", Help: "Actor restarts by role (portal, balancer, affinity, serviceport, ...)."}, []string{"role"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kproxy", Name: "faults_injected_total", Help: "Faults injected through the admin API, by kind."}, []string{"kind"})
	f(m.restarts)
	f(m.faults)
	m.ejections = counter(prometheus.Opts{Namespace: "kproxy", Name: "endpoint_ejections_total", Help: "Endpoints ejected by outlier detection."})
	f(newProxyProtocol())
	f(newTransparent())
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Synced records an applied change (full: a full kernel rules sync).
func (m *Metrics) Synced(full bool, d time.Duration) {
	if m == nil {
		return
	}
	m.syncDuration.Observe(d.Seconds())
	if full {
		m.syncFullDuration.Observe(d.Seconds())
	} else {
		m.syncPartialDuration.Observe(d.Seconds())
	}
	m.lastSync.SetToCurrentTime()
}

// Queued records a source change of kind ("EndpointSlice", or a Service change).
func (m *Metrics) Queued(kind string) {
	if m == nil {
		return
	}
	m.lastQueued.SetToCurrentTime()
	if kind == "EndpointSlice" {
		m.endpointChanges.Inc()
		m.endpointPending.Inc()
	} else {
		m.serviceChanges.Inc()
		m.servicePending.Inc()
	}
}

// Flushed records that every queued change was handed on.
func (m *Metrics) Flushed() {
	if m == nil {
		return
	}
	m.servicePending.Set(0)
	m.endpointPending.Set(0)
}

// NetworkProgrammed records the delay from an EndpointSlice's trigger time.
func (m *Metrics) NetworkProgrammed(trigger time.Time) {
	if m == nil || trigger.IsZero() {
		return
	}
	m.networkProgramming.Observe(time.Since(trigger).Seconds())
}

// Health counts a /healthz or /livez answer.
func (m *Metrics) Health(path string, code int) {
	if m == nil {
		return
	}
	c := m.livez
	if path == "/healthz" {
		c = m.healthz
	}
	c.WithLabelValues(strconv.Itoa(code)).Inc()
}

// PortalRules records how many kernel portal rules are programmed.
func (m *Metrics) PortalRules(n int) {
	if m != nil {
		m.portalRules.Set(float64(n))
	}
}

// NoLocalEndpoints records how many service ports drop their internal and
// their external traffic for want of a local endpoint (kube-proxy's gauge).
func (m *Metrics) NoLocalEndpoints(internal, external int) {
	if m != nil {
		m.noLocalEndpoints.WithLabelValues("internal").Set(float64(internal))
		m.noLocalEndpoints.WithLabelValues("external").Set(float64(external))
	}
}

// Restarted counts an actor restart of role.
func (m *Metrics) Restarted(role string) {
	if m != nil {
		m.restarts.WithLabelValues(role).Inc()
	}
}

// Fault counts an injected fault of kind (crash, endpoint, rules).
func (m *Metrics) Fault(kind string) {
	if m != nil {
		m.faults.WithLabelValues(kind).Inc()
	}
}

// Ejected counts an endpoint ejection.
func (m *Metrics) Ejected() {
	if m != nil {
		m.ejections.Inc()
	}
}
