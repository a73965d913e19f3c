package kubesource

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// roundTripFunc is the transport under the gate: the API server's answers.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAPIGateHoldsRequestsUntilTheProbeIsAnswered(t *testing.T) {
	var serverUp atomic.Bool
	var sent atomic.Int64
	rt := NewAPIGate()
	client := &http.Client{Transport: rt.Wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		if !serverUp.Load() {
			return nil, errors.New("connect: connection refused")
		}
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}))}
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://apiserver.invalid/api", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	// A request that gets no answer closes the gate.
	if err := get(context.Background()); err == nil || !rt.Down() {
		t.Fatalf("no answer: err %v, down %v; want an error and the gate closed", err, rt.Down())
	}
	// The next one is held, not sent (its caller gives up first here).
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := get(ctx); !errors.Is(err, context.DeadlineExceeded) || sent.Load() != 1 {
		t.Fatalf("held request: err %v, %d sent; want its deadline and only the first sent", err, sent.Load())
	}
	// A caller giving up does not mean the server is down or up.
	if !rt.Down() {
		t.Fatal("a cancelled request opened the gate")
	}

	held := make(chan error, 1)
	go func() { held <- get(context.Background()) }()
	// A probe is never held; while unanswered the gate stays closed.
	if err := get(probeContext(context.Background())); err == nil || !rt.Down() {
		t.Fatalf("unanswered probe: err %v, down %v", err, rt.Down())
	}
	serverUp.Store(true)
	if err := get(probeContext(context.Background())); err != nil || rt.Down() {
		t.Fatalf("answered probe: err %v, down %v; want the gate open", err, rt.Down())
	}
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("held request after the return: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held request was not released when the probe was answered")
	}
}
