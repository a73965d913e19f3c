package browsertest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The harness drives a page served on loopback: it waits for what a script
// draws, types, clicks, evaluates and screenshots; a script from a host that
// is not loopback never loads.
func TestBrowserDrivesLoopbackPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<!DOCTYPE html><html><body>
<input id="q"><button id="b" onclick="document.getElementById('out').textContent='clicked '+document.getElementById('q').value">go</button>
<p id="out"></p>
<script src="http://kproxy-test.invalid/remote.js" onerror="window.remoteFailed=true"></script>
<script>setTimeout(() => { const d = document.createElement('div'); d.id = 'late'; d.textContent = 'drawn'; document.body.append(d) }, 50)</script>
</body></html>`)
	}))
	defer srv.Close()

	b := New(t)
	b.Navigate(srv.URL)
	b.WaitVisible("#late")
	if got := b.Text("#late"); got != "drawn" {
		t.Errorf("text %q, want drawn", got)
	}
	b.Type("#q", "port 80")
	b.Click("#b")
	b.WaitTrue(`document.getElementById('out').textContent === 'clicked port 80'`, 5*time.Second)
	if n := Eval[int](b, `Promise.resolve(1 + 2)`); n != 3 {
		t.Errorf("Eval = %d, want 3", n)
	}
	b.WaitTrue(`window.remoteFailed === true`, 10*time.Second)

	png := filepath.Join(t.TempDir(), "page.png")
	b.Screenshot(png)
	data, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("screenshot is not a PNG (%d bytes)", len(data))
	}
	var sawPage, sawRemote bool
	for _, u := range b.Requests() {
		sawPage = sawPage || strings.HasPrefix(u, srv.URL)
		sawRemote = sawRemote || strings.Contains(u, "kproxy-test.invalid")
	}
	if !sawPage || !sawRemote {
		t.Errorf("requests %q: want the page and the remote script", b.Requests())
	}
}

// Offline cuts loopback too, and a file still opens.
func TestBrowserOffline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	page := filepath.Join(t.TempDir(), "page.html")
	os.WriteFile(page, []byte(`<!DOCTYPE html><p id="p">from disk</p>
<script>fetch(`+"`"+srv.URL+"`"+`).then(() => window.fetched = 'yes', () => window.fetched = 'no')</script>`), 0o644)

	b := New(t)
	b.Offline()
	b.Navigate(FileURL(page))
	if got := b.Text("#p"); got != "from disk" {
		t.Errorf("text %q, want from disk", got)
	}
	b.WaitTrue(`window.fetched !== undefined`, 10*time.Second)
	if got := Eval[string](b, `window.fetched`); got != "no" {
		t.Errorf("fetch of %s offline: %s, want no", srv.URL, got)
	}
}
