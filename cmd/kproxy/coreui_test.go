package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("page problems: %q", p)
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
