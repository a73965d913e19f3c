package actors

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// pendingTrace is a service's traced source events in one coalescing
// window: the first is the parent of the window's span, the others are
// linked to it.
type pendingTrace struct {
	parent   *messages.TraceContext
	received time.Time
	events   int
	links    []trace.Link
}

// trace records a traced source event until the flush that applies it.
func (w *Watcher) trace(m *SourceEvent) {
	if m.Trace == nil || w.cfg.Tracer == nil {
		return
	}
	if w.traced == nil {
		w.traced = map[string]*pendingTrace{}
	}
	pt := w.traced[m.Service]
	if pt == nil {
		w.traced[m.Service] = &pendingTrace{parent: m.Trace, received: time.Now(), events: 1}
		return
	}
	pt.events++
	if len(pt.links) < maxLinks {
		pt.links = append(pt.links, trace.LinkFromContext(extract(m.Trace)))
	}
}

// maxLinks bounds the events linked to one window's span: a service
// changing thousands of times in a window is one line, not thousands.
const maxLinks = 32

// flushTraces are the spans of one flush, by service.
type flushTraces struct {
	spans  map[string]trace.Span
	ctxs   map[string]*messages.TraceContext
	counts map[string][2]int // upserts, deletes
}

// flushTraces starts, for every traced service this flush changes, the
// span of its coalescing window (ending now) and the flush's span (ended
// by end, once the changes are sent). Traced services the flush leaves
// unchanged get their window's span too, marked as such.
func (w *Watcher) flushTraces(ch watcher.Changes) *flushTraces {
	if len(w.traced) == 0 {
		return nil
	}
	ft := &flushTraces{spans: map[string]trace.Span{}, ctxs: map[string]*messages.TraceContext{}, counts: map[string][2]int{}}
	for _, spe := range ch.Upserts {
		c := ft.counts[serviceOf(spe.GetServicePort().GetKey())]
		c[0]++
		ft.counts[serviceOf(spe.GetServicePort().GetKey())] = c
	}
	for _, k := range ch.Deletes {
		c := ft.counts[serviceOf(k)]
		c[1]++
		ft.counts[serviceOf(k)] = c
	}
	now := time.Now()
	for svc, pt := range w.traced {
		if w.tracker.Holds(svc) {
			continue // its change waits for the paced flush
		}
		delete(w.traced, svc)
		window, wctx := w.cfg.childSpan(pt.parent, spanCoalesce, trace.WithTimestamp(pt.received), trace.WithLinks(pt.links...),
			trace.WithAttributes(attrService.String(svc), attribute.Int("kproxy.events", pt.events)))
		c, changed := ft.counts[svc]
		window.SetAttributes(attribute.Bool("kproxy.changed", changed))
		window.End(trace.WithTimestamp(now))
		if !changed {
			continue // rejected, or back to what was applied: nothing follows
		}
		flush, fctx := w.cfg.childSpan(wctx, spanFlush, trace.WithTimestamp(now), trace.WithAttributes(attrService.String(svc),
			attribute.Int("kproxy.upserts", c[0]), attribute.Int("kproxy.deletes", c[1])))
		// An EndpointSlice's last-change-trigger-time: when the API
		// server's side of this change began.
		if t, ok := ch.Triggers[svc]; ok {
			flush.SetAttributes(attribute.String("kproxy.trigger_time", t.UTC().Format(time.RFC3339Nano)),
				attribute.Float64("kproxy.network_programming_seconds", now.Sub(t).Seconds()))
		}
		ft.spans[svc], ft.ctxs[svc] = flush, fctx
	}
	return ft
}

// context is the trace context for a change to service port k.
func (ft *flushTraces) context(k *messages.ServicePortKey) *messages.TraceContext {
	if ft == nil {
		return nil
	}
	return ft.ctxs[serviceOf(k)]
}

// end ends the flush spans once their changes are sent.
func (ft *flushTraces) end(generation int64) {
	if ft == nil {
		return
	}
	for _, s := range ft.spans {
		s.SetAttributes(attrGeneration.Int64(generation))
		s.End()
	}
}

// serviceOf is the service ("namespace/name") of a service port, as
// sources name it in their events.
func serviceOf(k *messages.ServicePortKey) string { return k.GetNamespace() + "/" + k.GetName() }
