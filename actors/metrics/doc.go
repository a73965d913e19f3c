// Package metrics defines kproxy's Prometheus metrics, all in one registry:
// kube-proxy's kubeproxy_* names and labels where the meaning carries over
// (so dashboards that scrape kube-proxy on :10249 keep working), kproxy's
// own kproxy_* ones, and the process and Go collectors (metrics.go);
// per service port traffic (serviceports.go); limits and idle closes
// (limits.go); client-go's request metrics (clientgo.go); protoactor's
// OpenTelemetry metrics (otel.go); a backend's link to its core
// (remote.go).
//
// The methods the actors call as things happen (Synced, Queued, Restarted,
// ...) are safe on a nil *Metrics, so the actors need no check when
// metrics are off; the ones that register collectors at start (ClientGo,
// Limits, Reaper, ServicePorts, Remote, MeterProvider) and Handler need one.
package metrics
