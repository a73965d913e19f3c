package liveview

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// Host names a DNS-rebinding page would send are refused; IP literals,
// localhost and the configured host on the server's port are not.
func TestGuardHosts(t *testing.T) {
	g := &guard{port: "10261", configured: "node-a.example"}
	for host, ok := range map[string]bool{
		"127.0.0.1:10261": true, "[::1]:10261": true, "localhost:10261": true, "LOCALHOST:10261": true,
		"192.0.2.7:10261": true, "node-a.example:10261": true,
		"attacker.example:10261": false, "127.0.0.1:10262": false, "127.0.0.1": false, "": false, "localhost.attacker.example:10261": false,
	} {
		if g.hostOK(host) != ok {
			t.Errorf("hostOK(%q) = %v, want %v", host, !ok, ok)
		}
	}
	h := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	for _, tc := range []struct {
		host, origin string
		status       int
	}{
		{"127.0.0.1:10261", "", 200},
		{"127.0.0.1:10261", "http://127.0.0.1:10261", 200},
		{"attacker.example:10261", "", 403},
		{"127.0.0.1:10261", "http://attacker.example", 403},
		{"127.0.0.1:10261", "http://localhost:10261", 403}, // another origin than the page's
		{"127.0.0.1:10261", "null", 403},
	} {
		req := httptest.NewRequest("GET", "/api/tree", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("Host %q Origin %q: %d, want %d", tc.host, tc.origin, rec.Code, tc.status)
		}
		if rec.Code == 200 && rec.Header().Get("X-Frame-Options") != "DENY" {
			t.Error("a response that may be framed")
		}
	}
}

func TestSplitActorID(t *testing.T) {
	const proxier = "kproxy/proxier"
	for id, want := range map[string][3]string{
		"kproxy/proxier/lv_svc:p_TCP-3":          {"kproxy/proxier/lv_svc:p_TCP-3", "serviceport", "true"},
		"kproxy/proxier/lv_svc:p_TCP-3/portal":   {"kproxy/proxier/lv_svc:p_TCP-3", "portal", "true"},
		"kproxy/proxier/lv_svc:p_TCP-3/affinity": {"kproxy/proxier/lv_svc:p_TCP-3", "affinity", "true"},
		"kproxy/proxier":                         {"", "", "false"},
		"kproxy/watcher":                         {"", "", "false"},
	} {
		sp, role, ok := splitActorID(id, proxier)
		if got := [3]string{sp, role, fmt.Sprint(ok)}; got != want {
			t.Errorf("splitActorID(%q) = %v, want %v", id, got, want)
		}
	}
}

func state(id int, gen int64, actor string) *messages.ServicePortState {
	return &messages.ServicePortState{Key: &messages.ServicePortKey{Namespace: "ns", Name: fmt.Sprintf("s%03d", id), PortName: "p"},
		Generation: gen, ActorId: actor}
}

// The model pages and filters over sorted ids, tells changes from other
// reports, keeps restart history per actor and drops it with the service
// port.
func TestModelPagesAndForgets(t *testing.T) {
	m := newModel("kproxy/proxier", map[string]string{"watcher": "kproxy/watcher"}, datapath.NewStatsTable())
	for i := 99; i >= 0; i-- {
		if c := m.reported(state(i, 1, fmt.Sprintf("kproxy/proxier/s%03d-%d", i, i))); c != "added" {
			t.Fatalf("first report: %q, want added", c)
		}
	}
	if c := m.reported(state(5, 1, "kproxy/proxier/s005-5")); c != "" {
		t.Errorf("same generation: %q, want no change", c)
	}
	if c := m.reported(state(5, 2, "kproxy/proxier/s005-5")); c != "updated" {
		t.Errorf("new generation: %q, want updated", c)
	}
	p := m.page("", 10, 5)
	if p.Total != 100 || p.Matched != 100 || len(p.Items) != 5 || p.Items[0].ID != state(10, 1, "").GetKey().ID() {
		t.Fatalf("page: %+v", p)
	}
	p = m.page("S09", 0, 50)
	if p.Matched != 10 || p.Items[0].ID != state(90, 1, "").GetKey().ID() {
		t.Fatalf("filter S09: matched %d, first %v", p.Matched, p.Items)
	}
	sp, role := m.failed("kproxy/proxier/s005-5/portal", time.Now(), "boom")
	if sp != state(5, 1, "").GetKey().ID() || role != "portal" {
		t.Fatalf("failed: %q %q", sp, role)
	}
	if _, role := m.failed("kproxy/watcher", time.Now(), "boom"); role != "watcher" {
		t.Fatalf("top actor role %q", role)
	}
	r := m.rowOf(sp)
	if r.Actors[1].Role != "portal" || r.Actors[1].Restarts != 1 || r.Actors[1].Status != statusRestarting {
		t.Fatalf("row after the failure: %+v", r.Actors)
	}
	m.back("kproxy/proxier/s005-5/portal", 1500000)
	if a := m.rowOf(sp).Actors[1]; a.Status != statusRunning || a.LastRestartMs != 1.5 {
		t.Fatalf("after the restart: %+v", a)
	}
	del := state(5, 3, "")
	del.Deleted = true
	if c := m.reported(del); c != "deleted" {
		t.Fatalf("deletion: %q", c)
	}
	if m.rowOf(sp) != nil || m.count() != 99 || m.actors["kproxy/proxier/s005-5/portal"] != nil {
		t.Fatal("the deleted service port is still in the model")
	}
	if tr := m.tree(); tr.Restarts != 2 || tr.Top[0].Restarts != 1 {
		t.Fatalf("tree: %+v", tr)
	}
}

// A subscriber that falls behind loses events, is told how many, and
// never blocks the publisher; a new one gets the recent past.
func TestHubBounds(t *testing.T) {
	h := newHub()
	s, _, cancel := h.subscribe()
	defer cancel()
	for i := range subscriberLen + 10 {
		h.publish(Event{Kind: kindChange, Text: fmt.Sprint(i)})
	}
	if n := s.takeDropped(); n != 10 {
		t.Fatalf("dropped %d, want 10", n)
	}
	_, past, cancel2 := h.subscribe()
	defer cancel2()
	if len(past) != historyLen || past[len(past)-1].Seq != subscriberLen+10 {
		t.Fatalf("history: %d events, last seq %d", len(past), past[len(past)-1].Seq)
	}
	for i, e := range past {
		if want := int64(subscriberLen + 10 - historyLen + 1 + i); e.Seq != want {
			t.Fatalf("history[%d]: seq %d, want %d (oldest first)", i, e.Seq, want)
		}
	}
}

// The fault endpoints answer only this host, with the token, a JSON body
// and fault injection on; the page carries the token only to this host.
func TestFaultRequestsFromThisHostOnly(t *testing.T) {
	g := &guard{port: "10261", token: "t0ken"}
	for _, tc := range []struct {
		name, remote, token, ctype string
		faultsOn                   bool
		want                       int
	}{
		{"ok", "127.0.0.1:5000", "t0ken", "application/json", true, 200},
		{"ipv6 loopback", "[::1]:5000", "t0ken", "application/json; charset=utf-8", true, 200},
		{"faults off", "127.0.0.1:5000", "t0ken", "application/json", false, 403},
		{"from the network", "192.0.2.9:5000", "t0ken", "application/json", true, 403},
		{"no token", "127.0.0.1:5000", "", "application/json", true, 401},
		{"wrong token", "127.0.0.1:5000", "t0kem", "application/json", true, 401},
		{"form", "127.0.0.1:5000", "t0ken", "application/x-www-form-urlencoded", true, 415},
		{"text", "127.0.0.1:5000", "t0ken", "text/plain", true, 415},
	} {
		req := httptest.NewRequest("POST", "/api/crash", nil)
		req.RemoteAddr = tc.remote
		req.Header.Set("Content-Type", tc.ctype)
		if tc.token != "" {
			req.Header.Set(tokenHeader, tc.token)
		}
		rec := httptest.NewRecorder()
		if ok := g.checkFaultRequest(rec, req, tc.faultsOn); ok != (tc.want == 200) || !ok && rec.Code != tc.want {
			t.Errorf("%s: ok %v, status %d, want %d", tc.name, ok, rec.Code, tc.want)
		}
	}

	v := &view{opts: Options{Injector: new(faults.Injector)}, guard: g}
	for remote, withToken := range map[string]bool{"127.0.0.1:5000": true, "192.0.2.9:5000": false} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		v.page(rec, req)
		if got := strings.Contains(rec.Body.String(), `content="t0ken"`); got != withToken {
			t.Errorf("page for %s carries the token: %v, want %v", remote, got, withToken)
		}
	}
	v.opts.Injector = nil
	req := httptest.NewRequest("GET", "/", nil)
	rec := httptest.NewRecorder()
	v.page(rec, req)
	if strings.Contains(rec.Body.String(), "t0ken") {
		t.Error("the page carries the token with fault injection off")
	}
}
