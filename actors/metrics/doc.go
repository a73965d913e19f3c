// Package metrics defines kproxy's Prometheus metrics: kube-proxy's names
// and labels where the meaning carries over (so dashboards that scrape
// kube-proxy on :10249 keep working), kproxy's own per service port and
// per actor role, the process and Go collectors, client-go's request
// metrics, and protoactor's OpenTelemetry metrics, all in one registry.
//
// Every method is safe on a nil *Metrics, so the actors need no check when
// metrics are off.
package metrics
