package messages

// TraceContext is a propagation.TextMapCarrier (OpenTelemetry's), so a
// W3C trace-context propagator injects a span's context into a message and
// extracts it on the receiving actor. Only the two W3C keys are carried.

// Get returns the value of a W3C trace-context key.
func (t *TraceContext) Get(key string) string {
	switch key {
	case "traceparent":
		return t.GetTraceparent()
	case "tracestate":
		return t.GetTracestate()
	}
	return ""
}

// Set stores a W3C trace-context key; other keys are dropped.
func (t *TraceContext) Set(key, value string) {
	switch key {
	case "traceparent":
		t.Traceparent = value
	case "tracestate":
		t.Tracestate = value
	}
}

// Keys lists the keys set.
func (t *TraceContext) Keys() []string {
	var keys []string
	if t.GetTraceparent() != "" {
		keys = append(keys, "traceparent")
	}
	if t.GetTracestate() != "" {
		keys = append(keys, "tracestate")
	}
	return keys
}
