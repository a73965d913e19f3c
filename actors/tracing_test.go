package actors

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/watcher"
)

// spanWaiter is a span processor that keeps every ended span and lets a
// test wait for one (the SDK's own, in-process: the real backend's test is
// in cmd/kproxy).
type spanWaiter struct {
	mu    sync.Mutex
	cond  *sync.Cond
	spans []sdktrace.ReadOnlySpan
}

func newSpanWaiter() *spanWaiter {
	w := &spanWaiter{}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *spanWaiter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (w *spanWaiter) Shutdown(context.Context) error                  { return nil }
func (w *spanWaiter) ForceFlush(context.Context) error                { return nil }
func (w *spanWaiter) OnEnd(s sdktrace.ReadOnlySpan) {
	w.mu.Lock()
	w.spans = append(w.spans, s)
	w.mu.Unlock()
	w.cond.Broadcast()
}

// wait returns the first ended span named name for which ok holds.
func (w *spanWaiter) wait(t *testing.T, name string, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, w.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(10 * time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for _, s := range w.spans {
			if s.Name() == name && (ok == nil || ok(s)) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for span %s", name)
		}
		w.cond.Wait()
	}
}

// parent returns s's parent once it has ended (a parent may end after
// its children: the Watcher's flush span ends once every change is sent).
func (w *spanWaiter) parent(t *testing.T, s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, w.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(10 * time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for _, p := range w.spans {
			if p.SpanContext().SpanID() == s.Parent().SpanID() && p.SpanContext().TraceID() == s.SpanContext().TraceID() {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("span %s: parent %s not found", s.Name(), s.Parent().SpanID())
		}
		w.cond.Wait()
	}
}

// chain walks from s up to the trace's root and returns the span names,
// s first.
func (w *spanWaiter) chain(t *testing.T, s sdktrace.ReadOnlySpan) []string {
	names := []string{s.Name()}
	for s.Parent().IsValid() {
		s = w.parent(t, s)
		names = append(names, s.Name())
	}
	return names
}

func attr(s sdktrace.ReadOnlySpan, k string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func startTracedProxy(t *testing.T) (*Proxy, *spanWaiter) {
	t.Helper()
	spans := newSpanWaiter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake(), BindAddress: "127.0.0.1", Tracer: tp.Tracer("test"),
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	p.SourceSynced()
	// Answered after the SourceSynced before it: the resync it starts is
	// over, so the test's changes are events, not part of it.
	if _, err := p.WatcherStats(); err != nil {
		t.Fatal(err)
	}
	return p, spans
}

// apply puts spes into the proxy's store and reports each changed service
// as a source event, as the file source does.
func apply(p *Proxy, spes ...*messages.ServicePortEndpoints) {
	for _, svc := range p.cfg.View.(*watcher.Store).Replace(spes, nil, false) {
		p.SourceEvent(watcher.Event{Kind: watcher.KindFile, Service: svc})
	}
}

// One change is one trace, from the source event through the Watcher's
// window and flush, the Proxier and the ServicePort to the Balancer, the
// Portal and the kernel transaction, each span a child of its cause.
func TestTracingFollowsAChangeThroughTheTree(t *testing.T) {
	p, spans := startTracedProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("traced", messages.Protocol_TCP, "198.18.0.21", 80)
	apply(p, spe(sp, endpoints(addrs...)))
	w.listening(t, sp.GetKey().ID(), 1, 1)

	tx := spans.wait(t, spanRulesTx, nil)
	want := []string{spanRulesTx, spanServicePort, spanProxierUpsert, spanFlush, spanCoalesce, spanSourceEvent}
	if got := spans.chain(t, tx); !equalStrings(got, want) {
		t.Fatalf("rules transaction's chain = %v, want %v", got, want)
	}
	if got := attr(tx, "kproxy.rules.upserted").AsInt64(); got == 0 {
		t.Errorf("rules transaction upserted %d rules, want some", got)
	}
	apply1 := spans.parent(t, tx)
	if got := attr(apply1, string(attrServicePort)).AsString(); got != sp.GetKey().ID() {
		t.Errorf("serviceport.apply service port = %q, want %q", got, sp.GetKey().ID())
	}
	if got := attr(apply1, string(attrEndpoints)).AsInt64(); got != 2 {
		t.Errorf("serviceport.apply endpoints = %d, want 2", got)
	}
	for _, name := range []string{spanSetEndpoints, spanConfigure} {
		s := spans.wait(t, name, nil)
		if got := spans.chain(t, s); got[1] != spanServicePort || got[len(got)-1] != spanSourceEvent {
			t.Errorf("%s chain = %v, want under %s, rooted at %s", name, got, spanServicePort, spanSourceEvent)
		}
		if s.SpanContext().TraceID() != tx.SpanContext().TraceID() {
			t.Errorf("%s is in another trace than the change's", name)
		}
	}
	if got := attr(spans.wait(t, spanSourceEvent, nil), string(attrService)).AsString(); got != "default/traced" {
		t.Errorf("source.event service = %q, want default/traced", got)
	}

	// An endpoint change alone: a new trace to the Balancer, no kernel
	// transaction (the rules do not change).
	apply(p, spe(sp, endpoints(addrs[0])))
	w.listening(t, sp.GetKey().ID(), 1, 2)
	set := spans.wait(t, spanSetEndpoints, func(s sdktrace.ReadOnlySpan) bool { return attr(s, string(attrEndpoints)).AsInt64() == 1 })
	if set.SpanContext().TraceID() == tx.SpanContext().TraceID() {
		t.Error("the second change joined the first change's trace")
	}
}

// A sampled connection is a trace of its own: accept to close, a pick per
// endpoint choice, and one dial span with each failed attempt as an event.
func TestTracingFollowsAConnection(t *testing.T) {
	p, spans := startTracedProxy(t)
	w := watchState(t, p)
	live := tcpBackends(t, 1)[0]
	dead := deadAddress(t)
	sp := svcPort("conn", messages.Protocol_TCP, "198.18.0.22", 80)
	apply(p, spe(sp, endpoints(dead, live)))
	st := w.listening(t, sp.GetKey().ID(), 1, 1)
	proxyAddr := net.JoinHostPort("127.0.0.1", itoa(st.GetProxyPort()))
	// Round robin: one of two connections picks the dead endpoint first.
	for range 2 {
		if got := dialName(t, proxyAddr); got != "backend-0" {
			t.Fatalf("reached %s, want backend-0", got)
		}
	}
	conn := spans.wait(t, spanConnectionName, func(s sdktrace.ReadOnlySpan) bool {
		for _, c := range childrenLocked(spans, s) {
			if c.Name() == "dial" && len(c.Events()) > 0 {
				return true
			}
		}
		return false
	})
	if conn.Parent().IsValid() {
		t.Error("a connection span has a parent; want a trace of its own")
	}
	if got := attr(conn, "kproxy.service_port").AsString(); got != sp.GetKey().ID() {
		t.Errorf("connection service port = %q, want %q", got, sp.GetKey().ID())
	}
	if got := attr(conn, "kproxy.bytes_to_client").AsInt64(); got == 0 {
		t.Error("connection span counts no bytes to the client")
	}
	if got := attr(conn, "kproxy.closed_first_by").AsString(); got != "client" {
		t.Errorf("closed first by %q, want client (the test hangs up)", got)
	}
	var picks int
	for _, c := range childrenOf(spans, conn) {
		switch c.Name() {
		case "pick":
			picks++
		case "dial":
			ev := c.Events()[0]
			if ev.Name != "dial failed" || !hasAttr(ev.Attributes, "kproxy.endpoint", dead) {
				t.Errorf("dial event = %s %v, want dial failed for %s", ev.Name, ev.Attributes, dead)
			}
			if got := attr(c, "kproxy.endpoint").AsString(); got != live {
				t.Errorf("dial span endpoint = %q, want %q", got, live)
			}
		}
	}
	if picks != 2 {
		t.Errorf("%d pick spans, want 2 (the dead endpoint, then the live one)", picks)
	}
}

// A crash is a trace: the supervisor's decision, the restart, and the
// restarted Portal's first accept.
func TestTracingFollowsACrash(t *testing.T) {
	p, spans := startTracedProxy(t)
	w := watchState(t, p)
	sp := svcPort("crashy", messages.Protocol_TCP, "198.18.0.23", 80)
	apply(p, spe(sp, endpoints(tcpBackends(t, 1)...)))
	st := w.listening(t, sp.GetKey().ID(), 1, 1)
	if err := p.Crash(sp.GetKey().ID(), rolePortal, "traced crash"); err != nil {
		t.Fatal(err)
	}
	restart := spans.wait(t, spanRestart, nil)
	fail := spans.parent(t, restart)
	if fail.Name() != spanSupervisor || attr(fail, string(attrActorKind)).AsString() != rolePortal {
		t.Fatalf("restart's parent = %s (%s), want %s of a portal", fail.Name(), attr(fail, string(attrActorKind)).AsString(), spanSupervisor)
	}
	if got := attr(fail, "kproxy.reason").AsString(); got == "" {
		t.Error("supervisor span has no reason")
	}
	dialName(t, net.JoinHostPort("127.0.0.1", itoa(st.GetProxyPort())))
	first := spans.wait(t, spanFirstAccept, nil)
	if got := spans.chain(t, first); !equalStrings(got, []string{spanFirstAccept, spanRestart, spanSupervisor}) {
		t.Fatalf("first accept's chain = %v", got)
	}
}

const spanConnectionName = "connection"

func childrenOf(w *spanWaiter, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	w.mu.Lock()
	defer w.mu.Unlock()
	return childrenLocked(w, parent)
}

// childrenLocked is childrenOf with w.mu held (inside a wait predicate).
func childrenLocked(w *spanWaiter, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range w.spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func hasAttr(kvs []attribute.KeyValue, k, v string) bool {
	for _, kv := range kvs {
		if string(kv.Key) == k && kv.Value.AsString() == v {
			return true
		}
	}
	return false
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// deadAddress is a loopback address nothing listens on (refuses at once).
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
