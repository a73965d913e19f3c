package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/messages"
)

// kproxy with tracing on sends its traces to a real Jaeger, and the
// query API shows their shape: an endpoint change as one trace from the
// file source's event to the Balancer, a connection with its pick and
// dial spans (a failed dial as an event), a crash with its restart.
func TestTracesReachJaeger(t *testing.T) {
	j := startJaeger(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // export every 100 ms, not 5 s

	port := backendsOn(t, "127.0.31.11")
	const id = "default/traced:tcp/TCP"
	in := startKproxyWith(t, service("traced", "127.0.31.1", 18080, port, "127.0.31.11"), func(o *runOptions) {
		o.tracing = tracingFlags{endpoint: j.otlp, samplingRatePerMillion: 1_000_000}
	})
	in.waitListening(t, id, 1)

	// The change: a second endpoint, where nothing listens.
	in.write(t, service("traced", "127.0.31.1", 18080, port, "127.0.31.11", "127.0.31.13"))
	in.waitListening(t, id, 2)
	// Round robin: one of two connections dials the dead endpoint first.
	for range 2 {
		if got := readName(t, "127.0.31.1:18080"); got != "127.0.31.11" {
			t.Fatalf("reached %s, want 127.0.31.11", got)
		}
	}
	if err := in.proxy.Crash(id, "portal", "traced crash"); err != nil {
		t.Fatal(err)
	}
	in.waitFor(t, "portal restarted", func(m map[string]*messages.ServicePortState) bool {
		return m[id].GetRestarts() == 1 && len(m[id].GetListenAddresses()) > 0
	})
	readName(t, "127.0.31.1:18080") // the restarted Portal's first accept

	// The change's trace: Balancer → ServicePort → Proxier → flush →
	// window → source event, with the service port and counts.
	want := []string{"balancer.set_endpoints", "serviceport.apply", "proxier.upsert", "watcher.flush", "watcher.coalesce", "source.event"}
	// Spans arrive in batches, a parent possibly after its children:
	// wait for the whole chain.
	change := eventually(t, j, "the endpoint change's whole trace", opSetEndpoints, func(tr jaegerTrace) bool {
		for _, s := range tr.named(opSetEndpoints) {
			if fmt.Sprint(s.tag("kproxy.endpoints")) == "2" {
				return len(tr.chain(s)) == len(want)
			}
		}
		return false
	})
	var set jaegerSpan
	for _, s := range change.named(opSetEndpoints) {
		if fmt.Sprint(s.tag("kproxy.endpoints")) == "2" {
			set = s
		}
	}
	if got := change.chain(set); !slices.Equal(got, want) {
		t.Fatalf("change trace chain = %v, want %v", got, want)
	}
	apply := change.span(set.parentID())
	if got := apply.tag("kproxy.service_port"); got != id {
		t.Errorf("serviceport.apply kproxy.service_port = %v, want %s", got, id)
	}
	if got := fmt.Sprint(apply.tag("kproxy.endpoints_changed")); got != "true" {
		t.Errorf("serviceport.apply kproxy.endpoints_changed = %v, want true", got)
	}
	src := change.named("source.event")[0]
	if src.tag("kproxy.service") != "default/traced" || src.tag("kproxy.kind") != "File" {
		t.Errorf("source.event tags service=%v kind=%v, want default/traced File", src.tag("kproxy.service"), src.tag("kproxy.kind"))
	}
	if len(change.named("portal.configure")) != 0 {
		t.Error("an endpoint change reconfigured the Portal (only its listeners' endpoints change)")
	}

	// The connection that met the dead endpoint: a pick for each
	// endpoint tried, one dial span with the failure as an event.
	conn := eventually(t, j, "a connection trace with a failed dial", "connection", func(tr jaegerTrace) bool {
		for _, d := range tr.named("dial") {
			if len(d.Logs) > 0 {
				return len(tr.chain(d)) == 2 && len(tr.named("pick")) == 2
			}
		}
		return false
	})
	dial := conn.named("dial")[0]
	if got := conn.chain(dial); !slices.Equal(got, []string{"dial", "connection"}) {
		t.Errorf("dial chain = %v, want dial under connection", got)
	}
	if got := dial.tag("kproxy.endpoint"); got != fmt.Sprintf("127.0.31.11:%d", port) {
		t.Errorf("dial kproxy.endpoint = %v, want the live endpoint", got)
	}
	if !strings.Contains(fmt.Sprint(dial.Logs[0].Fields), "127.0.31.13") {
		t.Errorf("dial's event %v does not name the dead endpoint", dial.Logs[0].Fields)
	}
	if n := len(conn.named("pick")); n != 2 {
		t.Errorf("%d pick spans, want 2", n)
	}
	root := conn.named("connection")[0]
	if root.tag("kproxy.service_port") != id || root.tag("kproxy.closed_first_by") != "client" {
		t.Errorf("connection tags service_port=%v closed_first_by=%v", root.tag("kproxy.service_port"), root.tag("kproxy.closed_first_by"))
	}

	// The crash: supervisor → restart → first accept.
	crash := eventually(t, j, "the crash's trace", "portal.first_accept", func(tr jaegerTrace) bool {
		return len(tr.Spans) == 3
	})
	first := crash.named("portal.first_accept")[0]
	if got := crash.chain(first); !slices.Equal(got, []string{"portal.first_accept", "actor.restart", "supervisor.failure"}) {
		t.Errorf("crash chain = %v", got)
	}
}

// Changes and crashes are always traced; new connections at the rate;
// a span with a parent follows its parent.
func TestTracingSampler(t *testing.T) {
	s := connectionSampler(0)
	root := func(name string) sdktrace.SamplingDecision {
		return s.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: trace.TraceID{1}, Name: name}).Decision
	}
	if root("connection") != sdktrace.Drop {
		t.Error("rate 0 samples a connection")
	}
	if root("source.event") != sdktrace.RecordAndSample || root("supervisor.failure") != sdktrace.RecordAndSample {
		t.Error("a change or a crash is not sampled")
	}
	if got := connectionSampler(1_000_000).ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: trace.TraceID{1}, Name: "connection"}); got.Decision != sdktrace.RecordAndSample {
		t.Error("rate 1000000 drops a connection")
	}
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	if got := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: unsampled, TraceID: trace.TraceID{1}, Name: "pick"}); got.Decision != sdktrace.Drop {
		t.Error("a child of an unsampled connection is sampled")
	}
}

func TestTracingFlagsValidate(t *testing.T) {
	for _, f := range []tracingFlags{{endpoint: "localhost"}, {samplingRatePerMillion: -1}, {samplingRatePerMillion: 1_000_001}} {
		if err := f.validate(); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
	if err := (&tracingFlags{endpoint: "127.0.0.1:4317", samplingRatePerMillion: 5}).validate(); err != nil {
		t.Error(err)
	}
}

const opSetEndpoints = "balancer.set_endpoints"

// eventually polls the query API (spans arrive in batches) until a trace
// with operation satisfies ok.
func eventually(t *testing.T, j *jaeger, what, operation string, ok func(jaegerTrace) bool) jaegerTrace {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		trs, err := j.traces(operation)
		if err == nil {
			for _, tr := range trs {
				if ok == nil || ok(tr) {
					return tr
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in Jaeger within 30s (last query: %d traces, %v)", what, len(trs), err)
		}
		time.Sleep(100 * time.Millisecond) // polling a remote API: no event to await
	}
}
