package kubesource

import (
	"context"
	"net/http"
	"sync"
)

// APIGate holds requests to the API server while it is known not to answer,
// and lets them go the moment it answers again.
//
// client-go's reflectors retry a failed list or watch with an exponential
// backoff (0.8 s doubling to 30 s, with up to 100% jitter, reset only after
// two quiet minutes): after an outage of a few tens of seconds the retry
// already scheduled can come 30 to 60 s after the API server is back, and
// changes made meanwhile wait that long. The backoff is not configurable
// through informers, so the gate keeps the reflectors from failing
// repeatedly instead: once a request gets no answer, the next ones wait
// here (not failing, so the backoff does not grow) until the source's probe
// (the Source's monitor, a cheap GET /livez every apiServerCheckInterval)
// gets an answer, and then all proceed at once.
//
// Only a transport failure (no HTTP response at all) closes the gate; any
// response, an error status included, opens it: the server is answering.
type APIGate struct {
	mu   sync.Mutex
	down bool
	up   chan struct{} // closed when the gate opens; replaced when it closes
}

// NewAPIGate returns an open gate.
func NewAPIGate() *APIGate {
	g := &APIGate{up: make(chan struct{})}
	close(g.up)
	return g
}

// Wrap is for rest.Config.WrapTransport.
func (g *APIGate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &gatedTransport{gate: g, next: rt}
}

// Down reports whether the gate is holding requests.
func (g *APIGate) Down() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

func (g *APIGate) wait(ctx context.Context) error {
	g.mu.Lock()
	up := g.up
	g.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *APIGate) set(answered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case answered && g.down:
		g.down = false
		close(g.up)
	case !answered && !g.down:
		g.down = true
		g.up = make(chan struct{})
	}
}

type probeKey struct{}

// probeContext marks a request as the probe: the gate never holds it, and
// its outcome opens or closes the gate.
func probeContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeKey{}, true)
}

type gatedTransport struct {
	gate *APIGate
	next http.RoundTripper
}

func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if ctx.Value(probeKey{}) == nil {
		if err := t.gate.wait(ctx); err != nil {
			return nil, err
		}
	}
	resp, err := t.next.RoundTrip(req)
	switch {
	case err == nil:
		t.gate.set(true)
	case ctx.Err() == nil || ctx.Value(probeKey{}) != nil:
		// No answer, and not because the caller gave up (a probe's
		// own deadline is an unanswered probe).
		t.gate.set(false)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath
// (utilnet.RoundTripperWrapper), to close idle connections.
func (t *gatedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
