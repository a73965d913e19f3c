package healthcheck

import (
	"slices"
	"testing"
)

// Ready only once every stage is done, whatever their order, and never
// again once draining; /readyz says so, and a watcher sees each change
// once, in order. /healthz stays kube-proxy's: healthy from the start.
func TestReadiness(t *testing.T) {
	r := NewReadiness(StageServicePorts, StageRules)
	h := NewProxyHealth(60e9, nil)
	h.Readiness = r
	handler := h.Handler()
	var seen []bool
	r.Watch(func(ready bool) { seen = append(seen, ready) })

	if code, body := get(t, handler, "/readyz"); code != 503 || body["ready"] != false {
		t.Fatalf("starting: /readyz %d %v, want 503 ready false", code, body)
	}
	if code, _ := get(t, handler, "/healthz"); code != 200 {
		t.Fatalf("starting: /healthz %d, want kube-proxy's 200", code)
	}
	r.Done(StageRules)
	r.Done(StageRules)
	if r.Ready() {
		t.Fatal("ready with the service ports not listening yet")
	}
	r.Done(StageServicePorts)
	if code, body := get(t, handler, "/readyz"); code != 200 || body["ready"] != true {
		t.Fatalf("serving: /readyz %d %v, want 200 ready true", code, body)
	}
	r.Drain()
	r.Done(StageServicePorts)
	if code, _ := get(t, handler, "/readyz"); code != 503 {
		t.Fatalf("draining: /readyz %d, want 503", code)
	}
	if want := []bool{false, true, false}; !slices.Equal(seen, want) {
		t.Fatalf("watcher saw %v, want %v", seen, want)
	}
	var nilReady *Readiness
	nilReady.Done(StageRules) // actors without readiness call it all the same
	nilReady.Drain()
}
