package liveview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
)

// Paging bounds of GET /api/servicePorts.
const (
	defaultLimit = 50
	maxLimit     = 500
)

func (v *view) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", v.page)
	mux.Handle("GET /static/", staticFiles())
	mux.HandleFunc("GET /api/tree", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, v.tree()) })
	mux.HandleFunc("GET /api/servicePorts", v.servicePorts)
	mux.HandleFunc("GET /api/events", v.events)
	mux.HandleFunc("POST /api/crash", v.crash)
	mux.HandleFunc("POST /api/storm", v.startStorm)
	return mux
}

func (v *view) tree() Tree {
	t := v.model.tree()
	t.FaultInjection = v.opts.Injector != nil
	if t.FaultInjection {
		t.StormKinds = v.stormKinds()
	}
	return t
}

// servicePorts serves GET /api/servicePorts?q=&offset=&limit=.
func (v *view) servicePorts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err := queryInt(q.Get("offset"), 0, 0, 1<<30)
	if err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("offset: %w", err))
		return
	}
	limit, err := queryInt(q.Get("limit"), defaultLimit, 1, maxLimit)
	if err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("limit: %w", err))
		return
	}
	writeJSON(w, v.model.page(q.Get("q"), offset, limit))
}

func queryInt(s string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q: want an integer from %d to %d", s, lo, hi)
	}
	return n, nil
}

// crashRequest is POST /api/crash's body: a service port's actor (portal,
// balancer, affinity, serviceport), or a top actor without a service port.
type crashRequest struct {
	ServicePort string `json:"servicePort,omitempty"`
	Actor       string `json:"actor"`
}

// crashReason is what the crashed actor's failure says.
const crashReason = "live view"

func (v *view) crash(w http.ResponseWriter, r *http.Request) {
	if !v.guard.checkFaultRequest(w, r, v.opts.Injector != nil) {
		return
	}
	var req crashRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	inj := v.opts.Injector
	var err error
	switch {
	case slices.Contains(actors.TopActors, req.Actor) && req.ServicePort == "":
		err = inj.CrashTop(req.Actor, crashReason)
	case req.ServicePort == "":
		err = fmt.Errorf("servicePort is required, unless actor is one of %v", actors.TopActors)
	default:
		err = inj.Crash(req.ServicePort, req.Actor, crashReason)
	}
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, actors.ErrUnknownServicePort) {
			status = http.StatusNotFound
		}
		httpError(w, status, err)
		return
	}
	writeJSON(w, req)
}

// stormRequest is POST /api/storm's body; zero values take the defaults.
type stormRequest struct {
	Rate     float64  `json:"rate,omitempty"`     // crashes per second
	Duration string   `json:"duration,omitempty"` // Go duration
	Kinds    []string `json:"kinds,omitempty"`
	Seed     uint64   `json:"seed,omitempty"`
}

// A storm from the page: 10 crashes a second for 5 s by default, at most
// 100 a second (the admin API's bound) for a minute.
const (
	defaultStormRate     = 10
	defaultStormDuration = 5 * time.Second
	maxStormRate         = 100
	maxStormDuration     = time.Minute
)

type stormState struct{ running atomic.Bool }

// stormKinds are the actor kinds a storm crashes by default: every kind
// this tree has.
func (v *view) stormKinds() []string {
	var kinds []string
	for _, k := range faults.ChaosKinds {
		if k != "rules" || v.opts.Proxy.RulesPID != nil {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// startStorm starts a storm and answers at once (202); its end, with the
// crashes it made, comes on the event stream.
func (v *view) startStorm(w http.ResponseWriter, r *http.Request) {
	if !v.guard.checkFaultRequest(w, r, v.opts.Injector != nil) {
		return
	}
	var req stormRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	d := defaultStormDuration
	if req.Duration != "" {
		var err error
		if d, err = time.ParseDuration(req.Duration); err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("duration %q: %w", req.Duration, err))
			return
		}
	}
	if req.Rate == 0 {
		req.Rate = defaultStormRate
	}
	if len(req.Kinds) == 0 {
		req.Kinds = v.stormKinds()
	}
	if !(req.Rate > 0 && req.Rate <= maxStormRate) || d <= 0 || d > maxStormDuration || len(req.Kinds) > 16 {
		httpError(w, http.StatusBadRequest, fmt.Errorf("want 0 < rate <= %d, 0 < duration <= %v, at most 16 kinds", maxStormRate, maxStormDuration))
		return
	}
	for _, k := range req.Kinds {
		if !slices.Contains(v.stormKinds(), k) {
			httpError(w, http.StatusBadRequest, fmt.Errorf("kind %q: want one of %v", k, v.stormKinds()))
			return
		}
	}
	if !v.storm.running.CompareAndSwap(false, true) {
		httpError(w, http.StatusConflict, faults.ErrChaosRunning)
		return
	}
	if req.Seed == 0 {
		req.Seed = uint64(time.Now().UnixNano())
	}
	v.hub.publish(Event{Kind: kindStorm, At: time.Now(), Text: fmt.Sprintf("storm started: %g crashes/s for %v over %v", req.Rate, d, req.Kinds)})
	go v.runStorm(v.ctx, req, d)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(map[string]any{"storm": "started", "rate": req.Rate, "duration": d.String(), "kinds": req.Kinds, "seed": req.Seed})
}

func (v *view) runStorm(ctx context.Context, req stormRequest, d time.Duration) {
	defer v.storm.running.Store(false)
	crashes, err := v.opts.Injector.Storm(ctx, req.Rate, d, req.Seed, req.Kinds)
	text := fmt.Sprintf("storm ended: %d crashes", len(crashes))
	if err != nil && ctx.Err() == nil {
		text = fmt.Sprintf("storm ended after %d crashes: %v", len(crashes), err)
	}
	v.hub.publish(Event{Kind: kindStorm, At: time.Now(), Text: text})
}

// decodeStrict reads one JSON object; unknown fields are errors.
func decodeStrict(body io.Reader, v any) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if dec.More() {
		return errors.New("request body: more than one JSON value")
	}
	return nil
}
