package healthcheck

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ProxyHealth tracks whether queued changes get applied in time, as
// kube-proxy's ProxyHealthServer does per IP family; here per stage (the
// source's changes, the kernel rules). A stage is unhealthy when a change
// has been queued for longer than the timeout without an Updated since.
// A stage that never completed an update counts as starting up, and so
// as healthy.
type ProxyHealth struct {
	timeout time.Duration
	// nodeEligible is false while this node is being deleted; nil means
	// always eligible (no Node to watch, as with the file source).
	nodeEligible func() bool
	now          func() time.Time
	// Observe, when set, is told every answer (metrics count them).
	Observe func(path string, code int)
	// Readiness, when set, is served as /readyz.
	Readiness *Readiness

	mu           sync.Mutex
	lastUpdated  map[string]time.Time
	oldestQueued map[string]time.Time
}

// NewProxyHealth returns a tracker with kube-proxy's health timeout
// (twice its sync period).
func NewProxyHealth(timeout time.Duration, nodeEligible func() bool) *ProxyHealth {
	return &ProxyHealth{timeout: timeout, nodeEligible: nodeEligible, now: time.Now,
		lastUpdated: map[string]time.Time{}, oldestQueued: map[string]time.Time{}}
}

// QueuedUpdate records that stage has a change to apply. Calls on a nil
// *ProxyHealth do nothing, so actors need no check when health is off.
func (h *ProxyHealth) QueuedUpdate(stage string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.oldestQueued[stage]; !ok {
		h.oldestQueued[stage] = h.now()
	}
}

// Updated records that stage applied everything queued.
func (h *ProxyHealth) Updated(stage string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.oldestQueued, stage)
	h.lastUpdated[stage] = h.now()
}

// IsHealthy reports the proxy's health, not the node's eligibility.
func (h *ProxyHealth) IsHealthy() bool {
	healthy, _ := h.health()
	return healthy
}

// health returns the health and the last time a stage was updated.
func (h *ProxyHealth) health() (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var last time.Time
	healthy := true
	for stage, updated := range h.lastUpdated {
		if updated.After(last) {
			last = updated
		}
		if queued, ok := h.oldestQueued[stage]; ok && now.Sub(queued) >= h.timeout {
			healthy = false
		}
	}
	return healthy, last
}

func (h *ProxyHealth) eligible() bool { return h.nodeEligible == nil || h.nodeEligible() }

// Handler serves /healthz (proxy health and node eligibility) and /livez
// (proxy health only), with kube-proxy's bodies.
func (h *ProxyHealth) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		eligible := h.eligible()
		healthy, last := h.health()
		h.write(w, "/healthz", healthy && eligible, last, fmt.Sprintf(`, "nodeEligible": %v`, eligible))
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		healthy, last := h.health()
		h.write(w, "/livez", healthy, last, "")
	})
	if h.Readiness != nil {
		// Not kube-proxy's: whether the process that answers serves. Two
		// processes of a hand-over share the port, so a probe of one pod
		// may be answered by the other: deploy/daemonset.yaml probes the
		// ready file (--ready-file) instead.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			ready := h.Readiness.Ready()
			code := http.StatusServiceUnavailable
			if ready {
				code = http.StatusOK
			}
			if h.Observe != nil {
				h.Observe("/readyz", code)
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"ready": %v}`, ready)
		})
	}
	return mux
}

func (h *ProxyHealth) write(w http.ResponseWriter, path string, healthy bool, last time.Time, extra string) {
	now := h.now().Round(0) // no monotonic clock reading in the body
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusServiceUnavailable
	if healthy {
		code = http.StatusOK
	}
	if h.Observe != nil {
		h.Observe(path, code)
	}
	if healthy {
		// kube-proxy reports a healthy proxy as updated now (older
		// releases synced periodically; probes compare the two times).
		last = now
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q%s}`, last.Round(0), now, extra)
}
