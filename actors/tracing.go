package actors

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/messages"
)

// Tracing: every applied change is one trace (source event → Watcher →
// Proxier → ServicePort → Balancer, Affinity, Portal, Rules), and every
// crash another (supervisor → restart → first accept). The span context
// travels inside the protobuf messages as W3C trace context, so each
// actor's span is a child of the one that caused it. With Config.Tracer
// nil every helper here is a nil check: no span, no allocation.

// Span names and attribute keys users see in their trace backend.
const (
	spanSourceEvent    = "source.event"
	spanCoalesce       = "watcher.coalesce"
	spanFlush          = "watcher.flush"
	spanProxierUpsert  = "proxier.upsert"
	spanProxierDelete  = "proxier.delete"
	spanServicePort    = "serviceport.apply"
	spanSetEndpoints   = "balancer.set_endpoints"
	spanAffinitySet    = "affinity.set_endpoints"
	spanConfigure      = "portal.configure"
	spanRulesTx        = "rules.transaction"
	spanSupervisor     = "supervisor.failure"
	spanRestart        = "actor.restart"
	spanFirstAccept    = "portal.first_accept"
	attrServicePort    = attribute.Key("kproxy.service_port")
	attrService        = attribute.Key("kproxy.service")
	attrGeneration     = attribute.Key("kproxy.generation")
	attrEndpoints      = attribute.Key("kproxy.endpoints")
	attrReadyEndpoints = attribute.Key("kproxy.endpoints.ready")
	attrActor          = attribute.Key("kproxy.actor")
	attrActorKind      = attribute.Key("kproxy.actor.kind")
)

var propagator = propagation.TraceContext{}

// noSpan is what the helpers return when nothing is traced: every Span
// method on it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// inject returns ctx's span context as a message field, nil when ctx
// carries no sampled span.
func inject(ctx context.Context) *messages.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	tc := &messages.TraceContext{}
	propagator.Inject(ctx, tc)
	return tc
}

// extract returns a context holding the span context a message carried.
func extract(tc *messages.TraceContext) context.Context {
	if tc.GetTraceparent() == "" {
		return context.Background()
	}
	return propagator.Extract(context.Background(), tc)
}

// childSpan starts a span continuing the trace a message carried. A
// message without one (tracing off, or a re-send after a restart) starts
// nothing: only changes that began at a source are traced. It returns the
// span (end it) and the trace context for the messages it causes.
func (c *Config) childSpan(parent *messages.TraceContext, name string, opts ...trace.SpanStartOption) (trace.Span, *messages.TraceContext) {
	if c.Tracer == nil || parent.GetTraceparent() == "" {
		return noSpan, nil
	}
	ctx, span := c.Tracer.Start(extract(parent), name, opts...)
	return span, inject(ctx)
}

// rootSpan starts a trace of its own (a source event, a crash).
func (c *Config) rootSpan(name string, opts ...trace.SpanStartOption) (trace.Span, *messages.TraceContext) {
	if c.Tracer == nil {
		return noSpan, nil
	}
	ctx, span := c.Tracer.Start(context.Background(), name, append(opts, trace.WithNewRoot())...)
	return span, inject(ctx)
}

// traceFailure starts a crash's trace when a supervisor handles a failure;
// the restarted actor continues it (traceRestart).
func (c *Config) traceFailure(e *actor.SupervisorEvent) {
	if c.Tracer == nil {
		return
	}
	id := e.Child.GetId()
	span, tc := c.rootSpan(spanSupervisor, trace.WithAttributes(attrActor.String(id), attrActorKind.String(roleOf(id)),
		attribute.String("kproxy.reason", fmt.Sprint(e.Reason)), attribute.String("kproxy.directive", e.Directive.String())))
	span.End()
	c.crashes.Store(id, tc)
}

// traceRestart records a restarted actor's start in its crash's trace and
// returns the trace context for what follows (a Portal's first accept);
// nil when the actor did not crash or tracing is off.
func (c *Config) traceRestart(ctx actor.Context) *messages.TraceContext {
	if c.Tracer == nil {
		return nil
	}
	v, ok := c.crashes.LoadAndDelete(ctx.Self().GetId())
	if !ok {
		return nil
	}
	span, tc := c.childSpan(v.(*messages.TraceContext), spanRestart,
		trace.WithAttributes(attrActor.String(ctx.Self().GetId()), attrActorKind.String(roleOf(ctx.Self().GetId()))))
	span.End()
	return tc
}

// firstAccept returns a hook for a Portal restarted after a crash: the
// span from its start to the first connection it accepts (restart to
// serving). nil when there is nothing to trace.
func (c *Config) firstAccept(parent *messages.TraceContext) func() {
	if parent == nil {
		return nil
	}
	span, _ := c.childSpan(parent, spanFirstAccept, trace.WithTimestamp(time.Now()))
	var once sync.Once // one Portal may serve several listeners
	return func() { once.Do(func() { span.End() }) }
}
