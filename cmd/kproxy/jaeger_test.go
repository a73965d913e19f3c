package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// envJaeger names the Jaeger binary test/build-jaeger.sh builds and
// `make test` exports.
const envJaeger = "KPROXY_JAEGER"

// jaeger is a real trace backend: Jaeger v2 with in-memory storage,
// receiving OTLP over gRPC and answering its query API, both on loopback.
type jaeger struct {
	otlp  string // host:port for --tracing-endpoint
	query string // http://host:port of the query API
}

// startJaeger starts Jaeger for the test and stops it when the test ends.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := os.Getenv(envJaeger)
	if bin == "" {
		t.Fatalf("$%s is not set: run `make test`, which builds Jaeger (or test/build-jaeger.sh, which prints its path)", envJaeger)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("$%s=%s: not a file (%v): run `make test`, which builds it", envJaeger, bin, err)
	}
	otlp, query, grpcQuery := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
extensions:
  jaeger_query:
    storage: {traces: mem}
    enable_tracing: false
    http: {endpoint: %q}
    grpc: {endpoint: %q}
  jaeger_storage:
    backends:
      mem: {memory: {max_traces: 10000}}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
processors:
  batch: {timeout: 50ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, query, grpcQuery, otlp)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", "file:"+path)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})
	j := &jaeger{otlp: otlp, query: "http://" + query}
	// Ready once the query API answers; nothing to await but the port.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var v any
		if err := j.get("/api/services", &v); err == nil {
			return j
		}
		select {
		case <-exited:
			t.Fatalf("jaeger exited:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API did not answer within 30s:\n%s", out.String())
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (j *jaeger) get(path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(j.query + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// The query API's JSON (Jaeger's UI model).
type jaegerTrace struct {
	TraceID string       `json:"traceID"`
	Spans   []jaegerSpan `json:"spans"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	Logs []struct {
		Fields []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"fields"`
	} `json:"logs"`
}

// traces returns the traces of service kproxy that have a span named
// operation.
func (j *jaeger) traces(operation string) ([]jaegerTrace, error) {
	var res struct {
		Data []jaegerTrace `json:"data"`
	}
	q := url.Values{"service": {"kproxy"}, "operation": {operation}, "limit": {"100"}, "lookback": {"1h"}}
	err := j.get("/api/traces?"+q.Encode(), &res)
	return res.Data, err
}

func (s jaegerSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

func (s jaegerSpan) parentID() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (tr jaegerTrace) span(id string) *jaegerSpan {
	for i := range tr.Spans {
		if tr.Spans[i].SpanID == id {
			return &tr.Spans[i]
		}
	}
	return nil
}

// named returns the trace's spans named name.
func (tr jaegerTrace) named(name string) []jaegerSpan {
	var out []jaegerSpan
	for _, s := range tr.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// chain lists the operation names from s up to its root.
func (tr jaegerTrace) chain(s jaegerSpan) []string {
	names := []string{s.OperationName}
	for p := tr.span(s.parentID()); p != nil; p = tr.span(p.parentID()) {
		names = append(names, p.OperationName)
	}
	return names
}
