package datapath

import (
	"context"
	"net"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// connTrace is one sampled TCP connection's trace: a "connection" span
// from accept to close, with a "pick" span per endpoint choice and one
// "dial" span over the dial attempts, each failure an event on it. A nil
// *connTrace (tracing off, or the connection not sampled) does nothing,
// so the data path pays one nil check.
type connTrace struct {
	ctx      context.Context
	span     trace.Span
	dial     trace.Span
	tracer   trace.Tracer
	accepted time.Time
}

// Span names and attributes of the connection path.
const (
	spanConnection = "connection"
	spanPick       = "pick"
	spanDial       = "dial"
)

// traceConn starts an accepted connection's trace; nil when tracing is off
// or the sampler left this connection out.
func (p *TCPProxy) traceConn(client *net.TCPConn) *connTrace {
	if p.Tracer == nil {
		return nil
	}
	ctx, span := p.Tracer.Start(context.Background(), spanConnection, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		return nil
	}
	span.SetAttributes(
		attribute.String("kproxy.service_port", p.ServicePort),
		attribute.String("network.transport", "tcp"),
		attribute.String("client.address", client.RemoteAddr().String()),
		attribute.String("server.address", client.LocalAddr().String()),
		attribute.Bool("kproxy.external", p.External),
	)
	return &connTrace{ctx: ctx, span: span, tracer: p.Tracer, accepted: time.Now()}
}

func (c *connTrace) now() time.Time {
	if c == nil {
		return time.Time{}
	}
	return time.Now()
}

// picked records one choice of endpoint (started at start).
func (c *connTrace) picked(start time.Time, pick Pick, exclude []string, err error) {
	if c == nil {
		return
	}
	_, span := c.tracer.Start(c.ctx, spanPick, trace.WithTimestamp(start), trace.WithAttributes(
		attribute.String("kproxy.endpoint", pick.Endpoint),
		attribute.Bool("kproxy.affinity_hit", pick.AffinityHit),
		attribute.StringSlice("kproxy.excluded", exclude),
	))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if c.dial == nil && err == nil {
		_, c.dial = c.tracer.Start(c.ctx, spanDial)
	}
}

// dialFailed records a failed dial attempt; the next endpoint is tried.
func (c *connTrace) dialFailed(endpoint string, err error) {
	if c == nil || c.dial == nil {
		return
	}
	c.dial.AddEvent("dial failed", trace.WithAttributes(attribute.String("kproxy.endpoint", endpoint), attribute.String("error", err.Error())))
}

// failed ends a connection no endpoint took: it is reset.
func (c *connTrace) failed(err error) {
	if c == nil {
		return
	}
	if c.dial != nil {
		c.dial.SetStatus(codes.Error, err.Error())
		c.dial.End()
	}
	c.span.SetStatus(codes.Error, err.Error())
	c.span.End()
}

// established ends the dial span: the connection is proxied.
func (c *connTrace) established(backend *net.TCPConn) {
	if c == nil {
		return
	}
	c.dial.SetAttributes(attribute.String("kproxy.endpoint", backend.RemoteAddr().String()))
	c.dial.End()
	c.span.AddEvent("established", trace.WithAttributes(attribute.String("kproxy.endpoint", backend.RemoteAddr().String())))
}

// closed ends the connection's span with what went through it.
func (c *connTrace) closed(toEndpoint, toClient int64, clientFirst bool) {
	if c == nil {
		return
	}
	first := "endpoint"
	if clientFirst {
		first = "client"
	}
	c.span.SetAttributes(
		attribute.Int64("kproxy.bytes_to_endpoint", toEndpoint),
		attribute.Int64("kproxy.bytes_to_client", toClient),
		attribute.Float64("kproxy.duration_seconds", time.Since(c.accepted).Seconds()),
		attribute.String("kproxy.closed_first_by", first),
	)
	c.span.End()
}
