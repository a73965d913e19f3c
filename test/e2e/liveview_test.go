//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// The live view of the real binary (bind portal on loopback): the page is
// embedded and names nothing off the machine; the service ports API
// filters and pages; the page is read-only without fault injection.
func TestLiveViewPageAndServicePorts(t *testing.T) {
	bin := binarytest.Build(t)
	ui := freeLoopbackPort(t)
	loopbackKproxy(t, bin, liveViewManifest(t, 30), "--ui-address", ui)
	waitServicePorts(t, ui, 30, 30*time.Second)

	resp, err := http.Get("http://" + ui + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, id := range []string{`id="tree"`, `id="filter"`, `id="events"`, `id="status"`, `id="storm"`} {
		if !strings.Contains(string(page), id) {
			t.Errorf("the page has no %s", id)
		}
	}
	if strings.Contains(string(page), `name="kproxy-token" content="`) && !strings.Contains(string(page), `name="kproxy-token" content=""`) {
		t.Error("the page carries a fault token without fault injection")
	}
	// The page and everything it loads: all from this server, nothing
	// naming another host.
	all := string(page)
	refs := assetRefs.FindAllStringSubmatch(string(page), -1)
	if len(refs) < 2 {
		t.Fatalf("the page loads %d assets, want its script and style: %s", len(refs), page)
	}
	for _, m := range refs {
		ref := m[1]
		if !strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "//") {
			t.Errorf("the page loads %q, not from this server", ref)
			continue
		}
		r, err := http.Get("http://" + ui + ref)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || len(body) == 0 {
			t.Errorf("GET %s: %s, %d bytes", ref, r.Status, len(body))
		}
		all += string(body)
	}
	for _, scheme := range []string{"http://", "https://", "ws://", "wss://"} {
		if i := strings.Index(all, scheme); i >= 0 {
			t.Errorf("the page or its assets name %q: ...%s...", scheme, all[max(0, i-40):min(len(all), i+60)])
		}
	}

	// Paging and the filter.
	var p lvPage
	getJSON(t, "http://"+ui+"/api/servicePorts?limit=10&offset=5", &p)
	if p.Total != 30 || p.Matched != 30 || len(p.Items) != 10 || p.Items[0].ID != lvServicePort(5) || p.Items[9].ID != lvServicePort(14) {
		t.Fatalf("limit=10&offset=5: total %d matched %d, items %d from %v", p.Total, p.Matched, len(p.Items), p.Items)
	}
	if len(p.Items[0].Listen) != 1 || len(p.Items[0].Actors) != 4 || p.Items[0].Actors[0].Role != "serviceport" {
		t.Errorf("svc-00005 (ClientIP): listen %v, actors %+v, want one listener and serviceport, portal, balancer, affinity", p.Items[0].Listen, p.Items[0].Actors)
	}
	getJSON(t, "http://"+ui+"/api/servicePorts?q=SVC-0001", &p)
	if p.Matched != 10 || len(p.Items) != 10 || p.Items[0].ID != lvServicePort(10) {
		t.Fatalf("q=SVC-0001: matched %d, items %v; want svc-00010 to svc-00019", p.Matched, p.Items)
	}
	if len(p.Items[1].Actors) != 3 {
		t.Errorf("svc-00011 (no affinity): actors %+v, want serviceport, portal, balancer", p.Items[1].Actors)
	}
	for _, bad := range []string{"limit=0", "limit=501", "offset=-1", "limit=x"} {
		r, err := http.Get("http://" + ui + "/api/servicePorts?" + bad)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: %s, want 400", bad, r.Status)
		}
	}

	// Read-only without fault injection, token or not.
	status, body := lvPost(t, ui, "/api/crash", "", `{"servicePort":"`+lvServicePort(1)+`","actor":"portal"}`, nil)
	if status != http.StatusForbidden || !strings.Contains(body, "fault injection is off") {
		t.Errorf("crash without fault injection: %d %s, want 403 naming fault injection", status, body)
	}
}

// The event stream and the fault buttons, fault injection on: a `kproxy
// chaos crash` of a Portal reaches an open stream as a restart within 1 s;
// the page's crash endpoint crashes with the token the page carries and
// refuses a foreign origin, a foreign host, a missing token and a non-JSON
// body; a storm from the page comes through the same stream, which stays
// open.
func TestLiveViewStreamAndCrashes(t *testing.T) {
	bin := binarytest.Build(t)
	ui, admin := freeLoopbackPort(t), freeLoopbackPort(t)
	tokenFile := t.TempDir() + "/admin-token"
	loopbackKproxy(t, bin, liveViewManifest(t, 20), "--ui-address", ui, "--enable-fault-injection",
		"--admin-address", admin, "--admin-token-file", tokenFile)
	waitServicePorts(t, ui, 20, 30*time.Second)
	events := sseStream(t, ui)
	awaitEvent(t, events, 5*time.Second, "the first tick", func(e sseEvent) bool { return e.Kind == "tick" })

	sp := lvServicePort(3)
	start := time.Now()
	out, err := exec.Command(bin, "chaos", "--admin-address", admin, "--admin-token-file", tokenFile, "crash", sp, "portal").CombinedOutput()
	if err != nil {
		t.Fatalf("kproxy chaos crash: %v\n%s", err, out)
	}
	e := awaitEvent(t, events, time.Second, "restart of "+sp+"'s portal", func(e sseEvent) bool {
		return e.Kind == "restart" && e.Data["servicePort"] == sp && e.Data["role"] == "portal"
	})
	t.Logf("kproxy chaos crash to the restart event on the stream: %v (the restart itself: %.2f ms): %s",
		e.At.Sub(start).Round(time.Microsecond), e.Data["tookMs"], e.Data["text"])
	if !strings.Contains(fmt.Sprint(e.Data["text"]), "restarted") {
		t.Errorf("restart event: %v", e.Data)
	}
	var p lvPage
	getJSON(t, "http://"+ui+"/api/servicePorts?q="+sp, &p)
	if len(p.Items) != 1 || p.Items[0].Actors[1].Role != "portal" || p.Items[0].Actors[1].Restarts != 1 {
		t.Fatalf("after the crash, %s: %+v, want its portal with 1 restart", sp, p.Items)
	}

	token := pageToken(t, ui)
	body := `{"servicePort":"` + sp + `","actor":"balancer"}`
	refusals := []struct {
		name    string
		token   string
		headers map[string]string
		body    string
		want    int
	}{
		{"foreign origin", token, map[string]string{"Origin": "http://attacker.example"}, body, http.StatusForbidden},
		{"foreign origin, same host name", token, map[string]string{"Origin": "http://" + admin}, body, http.StatusForbidden},
		{"DNS rebinding host", token, map[string]string{"Host": "attacker.example:" + strings.Split(ui, ":")[1]}, body, http.StatusForbidden},
		{"no token", "", nil, body, http.StatusUnauthorized},
		{"wrong token", strings.Repeat("0", len(token)), nil, body, http.StatusUnauthorized},
		{"form body", token, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "servicePort=x", http.StatusUnsupportedMediaType},
		{"text/plain body", token, map[string]string{"Content-Type": "text/plain"}, body, http.StatusUnsupportedMediaType},
		{"unknown field", token, nil, `{"servicePort":"` + sp + `","actor":"balancer","x":1}`, http.StatusBadRequest},
		{"unknown service port", token, nil, `{"servicePort":"lv/nope:p/TCP","actor":"portal"}`, http.StatusNotFound},
	}
	for _, r := range refusals {
		if status, resp := lvPost(t, ui, "/api/crash", r.token, r.body, r.headers); status != r.want {
			t.Errorf("%s: %d %s, want %d", r.name, status, resp, r.want)
		}
	}
	// The same origin, as the page's own fetch sends it, crashes.
	if status, resp := lvPost(t, ui, "/api/crash", token, body, map[string]string{"Origin": "http://" + ui}); status != 200 {
		t.Fatalf("crash from the page: %d %s", status, resp)
	}
	awaitEvent(t, events, time.Second, "restart of "+sp+"'s balancer", func(e sseEvent) bool {
		return e.Kind == "restart" && e.Data["servicePort"] == sp && e.Data["role"] == "balancer"
	})
	getJSON(t, "http://"+ui+"/api/servicePorts?q="+sp, &p)
	if p.Items[0].Actors[2].Role != "balancer" || p.Items[0].Actors[2].Restarts != 1 {
		t.Errorf("after the page's crash: %+v, want the balancer with 1 restart", p.Items[0].Actors)
	}
	// A refused request crashed nothing: one restart each so far.
	var tree struct{ Restarts int }
	getJSON(t, "http://"+ui+"/api/tree", &tree)
	if tree.Restarts != 2 {
		t.Errorf("restarts %d, want 2 (the refused requests must crash nothing)", tree.Restarts)
	}
	if status, resp := lvPost(t, ui, "/api/crash", token, `{"actor":"watcher"}`, nil); status != 200 {
		t.Fatalf("crash the watcher: %d %s", status, resp)
	}
	awaitEvent(t, events, time.Second, "restart of the watcher", func(e sseEvent) bool {
		return e.Kind == "restart" && e.Data["role"] == "watcher" && e.Data["servicePort"] == nil
	})

	// A storm from the page: every restart it causes arrives on the same
	// stream, which stays open and drops nothing.
	lvStorm(t, ui, token, events, 50, 2)
}

// The live view of 10,000 service ports: a page of 50 and a filtered
// page answer well under the 2 s a page load may take, and the page
// itself is small.
func TestLiveViewTenThousandServicePorts(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 listening sockets")
	}
	const n = 10000
	bin := binarytest.Build(t)
	ui, admin := freeLoopbackPort(t), freeLoopbackPort(t)
	manifest := liveViewManifest(t, n)
	start := time.Now()
	loopbackKproxy(t, bin, manifest, "--ui-address", ui, "--enable-fault-injection", "--admin-address", admin,
		"--admin-token-file", t.TempDir()+"/admin-token")
	waitServicePorts(t, ui, n, 3*time.Minute)
	t.Logf("%d service ports in the live view after %v", n, time.Since(start).Round(time.Millisecond))

	timed := func(url string, v any) time.Duration {
		t0 := time.Now()
		getJSON(t, url, v)
		return time.Since(t0)
	}
	var worst time.Duration
	for _, c := range []struct {
		query   string
		matched int
	}{
		{"limit=50", n},
		{"limit=50&offset=9950", n},
		{"q=svc-0999&limit=50", 10},
		{"q=nothing-matches&limit=50", 0},
		{"q=lv/&limit=50&offset=5000", n},
	} {
		var p lvPage
		took := timed("http://"+ui+"/api/servicePorts?"+c.query, &p)
		t.Logf("GET /api/servicePorts?%s: %v, %d items of %d matched", c.query, took.Round(time.Microsecond), len(p.Items), p.Matched)
		if p.Matched != c.matched || len(p.Items) != min(50, c.matched) {
			t.Errorf("?%s: matched %d with %d items, want %d", c.query, p.Matched, len(p.Items), c.matched)
		}
		for _, it := range p.Items {
			if len(it.Listen) != 1 {
				t.Errorf("%s listens on %v, want its cluster IP", it.ID, it.Listen)
			}
		}
		worst = max(worst, took)
	}
	var tree struct{ ServicePorts int }
	tookTree := timed("http://"+ui+"/api/tree", &tree)
	resp, err := http.Get("http://" + ui + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("GET /api/tree: %v; the page: %d bytes", tookTree.Round(time.Microsecond), len(page))
	// The bound for the whole page load is 2 s; one API call of
	// it must take a fraction.
	if worst > 500*time.Millisecond || tookTree > 500*time.Millisecond {
		t.Errorf("slowest page of service ports %v, tree %v: want well under 2 s", worst, tookTree)
	}
	if len(page) > 16<<10 {
		t.Errorf("the page is %d bytes; the initial load must be small", len(page))
	}

	// The event stream under a storm over 10,000 service ports.
	events := sseStream(t, ui)
	awaitEvent(t, events, 5*time.Second, "the first tick", func(e sseEvent) bool { return e.Kind == "tick" })
	lvStorm(t, ui, pageToken(t, ui), events, 100, 3)
}

// pageToken is the token the page served to this host carries.
func pageToken(t *testing.T, ui string) string {
	t.Helper()
	resp, err := http.Get("http://" + ui + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, rest, ok := strings.Cut(string(page), `name="kproxy-token" content="`)
	token, _, _ := strings.Cut(rest, `"`)
	if !ok || len(token) != 64 {
		t.Fatalf("the page served with fault injection has no token: %s", page)
	}
	return token
}

// lvPost POSTs a JSON body (unless headers set another Content-Type)
// with the token, returning the status and body.
func lvPost(t *testing.T, ui, path, token, body string, headers map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+ui+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Kproxy-Token", token)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// lvStorm starts a storm of rate crashes a second for seconds from the
// page, and checks that the stream brings a restart event for each
// failure the supervisors handled (the tree's count), and no "dropped".
func lvStorm(t *testing.T, ui, token string, events <-chan sseEvent, rate, seconds int) {
	t.Helper()
	var tree struct{ Restarts int }
	getJSON(t, "http://"+ui+"/api/tree", &tree)
	before := tree.Restarts
	if status, resp := lvPost(t, ui, "/api/storm", token, fmt.Sprintf(`{"rate":%d,"duration":"%ds","kinds":["portal","balancer","serviceport"]}`, rate, seconds), nil); status != http.StatusAccepted {
		t.Fatalf("storm: %d %s", status, resp)
	}
	if status, _ := lvPost(t, ui, "/api/storm", token, `{}`, nil); status != http.StatusConflict {
		t.Errorf("a second storm while one runs: %d, want 409", status)
	}
	restarts, slowest := 0, 0.0
	var lag time.Duration // from the server's event to this client reading it
	count := func(e sseEvent) {
		switch e.Kind {
		case "restart":
			restarts++
			if ms, _ := e.Data["tookMs"].(float64); ms > slowest {
				slowest = ms
			}
			if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e.Data["at"])); err == nil {
				lag = max(lag, e.At.Sub(at))
			}
		case "dropped":
			t.Errorf("the stream dropped events during the storm: %v", e.Data)
		}
	}
	end := awaitEvent(t, events, time.Duration(seconds)*time.Second+10*time.Second, "the storm's end", func(e sseEvent) bool {
		count(e)
		return e.Kind == "storm" && strings.HasPrefix(fmt.Sprint(e.Data["text"]), "storm ended")
	})
	// Each failure is one restart event, once the actor answers again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		getJSON(t, "http://"+ui+"/api/tree", &tree)
		if restarts >= tree.Restarts-before || time.Now().After(deadline) {
			break
		}
		select {
		case e := <-events:
			count(e)
		case <-time.After(100 * time.Millisecond):
		}
	}
	failures := tree.Restarts - before
	t.Logf("storm of %d crashes/s for %d s from the page: %s; %d failures, %d restart events on the stream, slowest restart %.2f ms, slowest delivery %v",
		rate, seconds, end.Data["text"], failures, restarts, slowest, lag.Round(time.Microsecond))
	if restarts != failures {
		t.Errorf("%d restart events for %d failures", restarts, failures)
	}
	if lag > time.Second {
		t.Errorf("a restart event reached the stream's client %v after it happened, want within 1 s", lag)
	}
	if failures < rate*seconds/2 {
		t.Errorf("the storm made %d failures, want about %d", failures, rate*seconds)
	}
}
