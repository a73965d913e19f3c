package main

import (
	"io"
	"math"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
)

// scrape GETs /metrics (retrying while the server starts, at most 10 s)
// and parses it with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			defer resp.Body.Close()
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(resp.Body)
			if err != nil {
				t.Fatalf("/metrics does not parse: %v", err)
			}
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string) (uint64, float64) {
	t.Helper()
	f := fams[name]
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("no histogram %s", name)
	}
	h := f.GetMetric()[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// /metrics speaks kube-proxy's names (dashboards that scrape kube-proxy
// work) and kproxy's own; network programming latency is measured from an
// EndpointSlice's trigger-time annotation, on a real API server.
func TestMetricsKubeProxyNamesAndNetworkProgramming(t *testing.T) {
	s, k, web, ip1, ip2 := startWeb(t)

	metricsAddr := freeAddr(t)
	j := startJaeger(t) // the same change, traced: its flush carries the trigger time
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	in := startKubeKproxy(t, s, func(o *runOptions) {
		o.metricsBindAddress, o.metricsPortsLimit, o.metricsActors = metricsAddr, 100, true
		o.tracing = tracingFlags{endpoint: j.otlp}
	})
	addr1 := netip.AddrPortFrom(ip1, 8080).String()
	in.endpointsAre(t, "default/web:tcp/TCP", addr1)
	started := time.Now()                    // kproxy's source is watching
	readName(t, web.Spec.ClusterIP+":18080") // one proxied connection

	// kube-proxy's /proxyMode: the mode, and nothing else.
	resp, err := http.Get("http://" + metricsAddr + "/proxyMode")
	if err != nil {
		t.Fatal(err)
	}
	mode, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(mode) != "bind" {
		t.Errorf("GET /proxyMode: %d %q, want 200 \"bind\" (the portal mode)", resp.StatusCode, mode)
	}

	fams := scrape(t, metricsAddr)
	for _, name := range []string{
		"kubeproxy_sync_proxy_rules_duration_seconds",
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds",
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
		"kubeproxy_network_programming_duration_seconds",
		"kubeproxy_sync_proxy_rules_service_changes_total",
		"kubeproxy_sync_proxy_rules_service_changes_pending",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending",
		"process_cpu_seconds_total",
		"go_goroutines",
		"rest_client_requests_total",
		"kproxy_service_port_connections_total",
		"kproxy_service_port_bytes_total",
	} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	webConns := -1.0
	for _, m := range fams["kproxy_service_port_connections_total"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "default/web:tcp/TCP" {
			webConns = m.GetCounter().GetValue()
		}
	}
	if webConns < 1 {
		t.Errorf("kproxy_service_port_connections_total{service_port=\"default/web:tcp/TCP\"} = %v, want >= 1", webConns)
	}
	var protoactor []string
	for name := range fams {
		if strings.HasPrefix(name, "protoactor") {
			protoactor = append(protoactor, name)
		}
	}
	sort.Strings(protoactor)
	if len(protoactor) == 0 {
		t.Error("no protoactor metrics (the OpenTelemetry bridge)")
	}
	t.Logf("protoactor's metrics: %v", protoactor)

	// An EndpointSlice change whose trigger happened 300 ms before the
	// update, as the EndpointSlice controller stamps it, but not before
	// kproxy started (as kube-proxy, it observes no trigger from before).
	count0, sum0 := histogram(t, fams, "kubeproxy_network_programming_duration_seconds")
	trigger := time.Now().Add(-300 * time.Millisecond)
	if !trigger.After(started) {
		trigger = started.Add(time.Millisecond)
	}
	sl := k.slice("web", "web-a", 8080, readyEP(ip1.String()), readyEP(ip2.String()))
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	k.apply(sl)
	in.endpointsAre(t, "default/web:tcp/TCP", addr1, netip.AddrPortFrom(ip2, 8080).String())
	measured := time.Since(trigger)

	count, sum := histogram(t, scrape(t, metricsAddr), "kubeproxy_network_programming_duration_seconds")
	if count != count0+1 {
		t.Fatalf("network programming observations: %d -> %d, want one more", count0, count)
	}
	observed := sum - sum0
	t.Logf("network programming: observed %.3fs, measured %.3fs", observed, measured.Seconds())
	if math.Abs(observed-measured.Seconds()) > 0.1 {
		t.Errorf("network programming duration %.3fs, measured %.3fs: more than 100 ms apart", observed, measured.Seconds())
	}

	// In Jaeger: the EndpointSlice event's trace, its flush stamped with
	// the slice's trigger time.
	// Spans reach Jaeger in batches: the Balancer's may come after the
	// flush's, so the trace is complete once it has one.
	tr := eventually(t, j, "the EndpointSlice change's trace with its trigger time and the Balancer's span", "watcher.flush", func(tr jaegerTrace) bool {
		if len(tr.named("balancer.set_endpoints")) == 0 {
			return false
		}
		for _, f := range tr.named("watcher.flush") {
			if v, ok := f.tag("kproxy.trigger_time").(string); ok {
				at, err := time.Parse(time.RFC3339Nano, v)
				return err == nil && at.Sub(trigger).Abs() < time.Millisecond && len(tr.chain(f)) == 3 // flush, window, event
			}
		}
		return false
	})
	if src := tr.named("source.event"); len(src) != 1 || src[0].tag("kproxy.kind") != "EndpointSlice" || src[0].tag("kproxy.service") != "default/web" {
		t.Errorf("the trace's source event: %+v, want one EndpointSlice event of default/web", src)
	}
	if n := len(tr.named("balancer.set_endpoints")); n != 1 {
		t.Errorf("%d balancer.set_endpoints spans in the change's trace, want 1", n)
	}
}
