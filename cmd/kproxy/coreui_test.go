package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/browsertest"
)

// coreWithSubscriber starts a core serving its page on a loopback port and
// one backend (kproxy watch --source remote:, node-a) subscribed to it;
// change rewrites the manifest so node-a's view changes (one delta).
func coreWithSubscriber(t *testing.T) (ui string, core *proc, change func()) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("local", "198.18.0.60", 8080, 8080, [][2]string{{"192.0.2.11", "node-a"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	ui = fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core = startProc(t, "core", coreArgs(coreAddr, manifest, "--ui-address", ui)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	core.waitLog(t, "serving core page", 1, 30*time.Second)
	startProc(t, "node-a", "watch", "--source", "remote:"+coreAddr, "--node-name", "node-a", "--json")
	core.waitLog(t, "backend subscribed", 1, 30*time.Second)
	return ui, core, func() {
		replaceFile(t, manifest, localService("local", "198.18.0.60", 8080, 8080, [][2]string{{"192.0.2.11", "node-a"}, {"192.0.2.12", "node-a"}}))
	}
}

func getCore(t *testing.T, ui string) coreView {
	t.Helper()
	resp, err := http.Get("http://" + ui + "/api/core")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v coreView
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /api/core: %s %s", resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET /api/core: %v", err)
	}
	return v
}

// awaitCore polls the core's JSON until ok holds for it (the core announces
// no acknowledgement a test could await otherwise).
func awaitCore(t *testing.T, ui, what string, ok func(coreView) bool) coreView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := getCore(t, ui)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("core never showed %s: %+v", what, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeA(v coreView) *subscriberView {
	for i := range v.Subscribers {
		if v.Subscribers[i].Node == "node-a" {
			return &v.Subscribers[i]
		}
	}
	return nil
}

// kproxy watch --serve --ui-address: the JSON the core's page reads lists
// the subscriber, its node, what was sent and how far it lags; the page is
// one self-contained file; a foreign Host is refused.
func TestCoreUIListsSubscribers(t *testing.T) {
	ui, _, change := coreWithSubscriber(t)

	v := awaitCore(t, ui, "node-a subscribed and in sync", func(v coreView) bool {
		s := nodeA(v)
		return s != nil && s.Snapshots == 1 && s.Unacknowledged == 0
	})
	s := nodeA(v)
	if len(v.Subscribers) != 1 || s.Client != "kproxy watch" || s.ServicePorts != 1 || s.Deltas != 0 || s.LagSeconds != 0 || s.Behind {
		t.Fatalf("subscribers %+v, want node-a (kproxy watch) with 1 service port, a snapshot, no delta, no lag", v.Subscribers)
	}
	if v.Counters.Subscriptions != 1 || v.Counters.Snapshots != 1 || !strings.HasPrefix(v.Source, "file:") || v.Address == "" {
		t.Fatalf("core %+v", v)
	}

	change()
	v = awaitCore(t, ui, "node-a's delta acknowledged", func(v coreView) bool {
		s := nodeA(v)
		return s != nil && s.Deltas == 1 && s.Acked == s.Seq
	})
	if s := nodeA(v); s.Seq != 2 || s.Unacknowledged != 0 || v.Counters.Deltas != 1 {
		t.Fatalf("after one change: %+v, counters %+v; want seq 2 (snapshot, delta), all acknowledged", s, v.Counters)
	}

	resp, err := http.Get("http://" + ui + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "api/core/events") {
		t.Fatalf("GET /: %s", resp.Status)
	}
	for _, ref := range []string{"http://", "https://", "src=", "href="} {
		if strings.Contains(string(page), ref) {
			t.Errorf("the page refers to %q: it must need nothing but the core", ref)
		}
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+ui+"/api/core", nil)
	req.Host = "rebound.example:" + strings.Split(ui, ":")[1]
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host %s: %s, want 403", req.Host, resp.Status)
	}
}

// The page in a real browser lists the subscriber, and shows a change's
// delta as it happens, without a reload.
func TestCoreUIPageInBrowser(t *testing.T) {
	b := browsertest.New(t)
	ui, _, change := coreWithSubscriber(t)
	b.Navigate("http://" + ui + "/")
	b.WaitTrue(`document.querySelector('#subscribers tr[data-node="node-a"] td.deltas')?.textContent === "0"`, 10*time.Second)
	if got := b.Text(`#state`); got != "live" {
		t.Errorf("stream state %q, want live", got)
	}
	change()
	b.WaitTrue(`document.querySelector('#subscribers tr[data-node="node-a"] td.deltas')?.textContent === "1"`, 10*time.Second)
	b.Type("#filter", "node-b")
	b.WaitTrue(`document.querySelectorAll('#subscribers tbody tr').length === 0`, 5*time.Second)
	b.Type("#filter", "")
	b.WaitTrue(`document.querySelectorAll('#subscribers tbody tr').length === 1`, 5*time.Second)
	b.Screenshot(browsertest.ScreenshotPath(t, "core-page.png"))
	for _, u := range b.Requests() {
		if !strings.HasPrefix(u, "http://"+ui+"/") {
			t.Errorf("the page asked for %s", u)
		}
	}
	// The page closes its event stream to ask for another filter: those
	// requests end aborted, by design.
	var problems []string
	for _, p := range b.Problems() {
		if !strings.HasSuffix(p, "net::ERR_ABORTED") {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		t.Errorf("page problems: %q", problems)
	}
}

// --ui-address is the core's, and loopback unless insisted on.
func TestCoreUIAddressChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--source", "file:testdata/watch.yaml", "--ui-address", "127.0.0.1:0"}, "--ui-address needs --serve"},
		{[]string{"--source", "file:testdata/watch.yaml", "--serve", "127.0.0.1:0", "--ui-address", "192.0.2.1:8080"}, "not a loopback address"},
		{[]string{"--source", "file:testdata/watch.yaml", "--serve", "127.0.0.1:0", "--ui-address", "127.0.0.1"}, "--ui-address"},
	} {
		err := watchCommand(c.args, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// TestCoreUIPagesThousands: with 5,000 subscribers the page gets a summary
// of all of them and one page of those its filter matches.
func TestCoreUIPagesThousands(t *testing.T) {
	now := time.Unix(1700000000, 0)
	var subs []*messages.SubscriptionStats
	for i := range 5000 {
		s := &messages.SubscriptionStats{NodeName: fmt.Sprintf("node-%d", i), Client: "kproxy run", Subscriber: fmt.Sprintf("127.0.0.1:%d/sub", 20000+i),
			Seq: 10, Acked: 10, SubscribedUnixNano: now.UnixNano(), LastAckUnixNano: now.UnixNano()}
		switch {
		case i%1000 == 7:
			s.Behind, s.Acked, s.UnackedSinceUnixNano = true, 2, now.Add(-9*time.Second).UnixNano()
		case i%100 == 3:
			s.Acked, s.UnackedSinceUnixNano = 9, now.Add(-time.Second).UnixNano()
		}
		subs = append(subs, s)
	}
	for _, c := range []struct {
		query           string
		matched, offset int
		first           string
		rows            int
	}{
		{"", 5000, 0, "node-0", coreUIDefaultLimit},
		{"offset=4950", 5000, 4950, "node-954", 50}, // by name: node-999 is last
		{"q=NODE-42&limit=20", 111, 0, "node-42", 20},
		{"q=node-42&offset=100&limit=20", 111, 100, "node-429", 11}, // by name: node-429 comes before node-4290
		{"q=nobody", 0, 0, "", 0},
		{"offset=9999&limit=100000", 5000, 5000, "", 0},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/core?"+c.query, nil)
		v := &coreView{Subscribers: []subscriberView{}}
		v.page(subs, now, parseCoreQuery(r))
		if v.Matched != c.matched || v.Offset != c.offset || len(v.Subscribers) != c.rows {
			t.Errorf("%q: matched %d, offset %d, %d rows; want %d, %d, %d", c.query, v.Matched, v.Offset, len(v.Subscribers), c.matched, c.offset, c.rows)
			continue
		}
		if c.rows > 0 && v.Subscribers[0].Node != c.first {
			t.Errorf("%q: first row %s, want %s", c.query, v.Subscribers[0].Node, c.first)
		}
		if sum := v.Summary; sum.Behind != 5 || sum.Applying != 50 || sum.InSync != 4945 || sum.MaxLagSeconds != 9 || sum.MaxLagNode != "node-7" {
			t.Errorf("%q: summary %+v, want 4945 in sync, 50 applying, 5 behind, longest lag 9 s on node-7", c.query, sum)
		}
		if b, _ := json.Marshal(v); len(b) > 100_000 {
			t.Errorf("%q: a page of %d bytes", c.query, len(b))
		}
	}
}
