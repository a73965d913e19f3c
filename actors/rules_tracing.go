package actors

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/rules"
)

// traced keeps a change's trace context until the transaction that
// programs it.
func (r *Rules) traced(id string, tc *messages.TraceContext) {
	if tc == nil {
		return
	}
	if r.traces == nil {
		r.traces = map[string]*messages.TraceContext{}
	}
	r.traces[id] = tc
}

// transactionSpan starts the span of one kernel transaction: a child of
// the first traced change it programs, linked to the others (one
// transaction serves many changes).
func (r *Rules) transactionSpan(full bool, batch int64, upserts, removals int) trace.Span {
	if r.cfg.Tracer == nil || len(r.traces) == 0 {
		return noSpan
	}
	var parent *messages.TraceContext
	var links []trace.Link
	for id := range r.pending {
		tc := r.traces[id]
		if tc == nil {
			continue
		}
		delete(r.traces, id)
		if parent == nil {
			parent = tc
		} else if len(links) < maxLinks {
			links = append(links, trace.LinkFromContext(extract(tc)))
		}
	}
	span, _ := r.cfg.childSpan(parent, spanRulesTx, trace.WithLinks(links...), trace.WithAttributes(
		attribute.Bool("kproxy.full_sync", full), attribute.Int64("kproxy.batch", batch),
		attribute.Int("kproxy.service_ports", len(r.pending)),
		attribute.Int("kproxy.rules.upserted", upserts), attribute.Int("kproxy.rules.removed", removals)))
	return span
}

// endTransactionSpan ends it with the transaction's outcome (on the
// transaction's goroutine).
func endTransactionSpan(span trace.Span, err error) {
	switch {
	case err == nil:
	case errors.Is(err, rules.ErrFamilyUnavailable):
		span.AddEvent("rules of an unavailable IP family left out", trace.WithAttributes(attribute.String("error", err.Error())))
	default:
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
