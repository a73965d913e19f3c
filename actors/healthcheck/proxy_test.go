package healthcheck

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, rec.Body.String(), err)
	}
	return rec.Code, body
}

// kube-proxy's contract: healthy while starting up and while queued
// changes are younger than the timeout; unhealthy once one is older;
// /healthz also unhealthy while the node is being deleted.
func TestProxyHealthContract(t *testing.T) {
	now := time.Unix(1000, 0)
	eligible := true
	h := NewProxyHealth(time.Minute, func() bool { return eligible })
	h.now = func() time.Time { return now }
	handler := h.Handler()

	h.QueuedUpdate("rules") // never updated yet: starting up
	now = now.Add(2 * time.Minute)
	if code, body := get(t, handler, "/healthz"); code != 200 || body["nodeEligible"] != true || body["lastUpdated"] == nil || body["currentTime"] == nil {
		t.Fatalf("starting up: %d %v, want 200 with lastUpdated, currentTime, nodeEligible", code, body)
	}
	h.Updated("rules")
	h.QueuedUpdate("rules")
	now = now.Add(59 * time.Second)
	if code, _ := get(t, handler, "/livez"); code != 200 {
		t.Fatalf("a change queued 59 s ago: %d, want 200", code)
	}
	now = now.Add(time.Second)
	if code, _ := get(t, handler, "/healthz"); code != 503 {
		t.Fatalf("a change queued a minute ago: /healthz %d, want 503", code)
	}
	if code, body := get(t, handler, "/livez"); code != 503 || body["nodeEligible"] != nil {
		t.Fatalf("a change queued a minute ago: /livez %d %v, want 503 without nodeEligible", code, body)
	}
	h.Updated("rules")
	if h.IsHealthy() != true {
		t.Fatal("unhealthy after the update")
	}
	eligible = false
	if code, body := get(t, handler, "/healthz"); code != 503 || body["nodeEligible"] != false {
		t.Fatalf("node being deleted: /healthz %d %v, want 503, nodeEligible false", code, body)
	}
	if code, _ := get(t, handler, "/livez"); code != 200 {
		t.Fatalf("node being deleted: /livez %d, want 200 (liveness ignores the node)", code)
	}
	var nilHealth *ProxyHealth
	nilHealth.QueuedUpdate("x") // off: no panic
	nilHealth.Updated("x")
}
