package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Timeout bounds each action of a Browser: a page that never shows what a
// test waits for fails the test instead of hanging it.
const Timeout = 30 * time.Second

// StartTimeout bounds the start of the browser (a few hundred
// milliseconds on an idle machine).
const StartTimeout = time.Minute

// lockedBuffer holds chromium's output, written by chromedp's goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Browser is one headless Chromium with one tab, for one test.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	requests []string
	problems []string
}

// Chromium is the path of the chromium binary: $KPROXY_CHROMIUM, else
// chromium (or chromium-browser) on PATH, else Debian's /usr/bin/chromium.
func Chromium() (string, error) {
	if p := os.Getenv("KPROXY_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium", nil
	}
	return "", errors.New("chromium not found (on PATH, /usr/bin/chromium or $KPROXY_CHROMIUM)")
}

// New starts a headless Chromium for the test, or skips the test where
// there is none. The browser ends with the test.
func New(t testing.TB) *Browser {
	t.Helper()
	path, err := Chromium()
	if err != nil {
		if os.Geteuid() == 0 {
			t.Skipf("browser tests need chromium: %v; `make test-deps` installs it", err)
		}
		t.Skipf("browser tests need chromium: %v; as root, `make test-deps` installs it (apt-get install chromium)", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(1280, 900),
		// Loopback stays direct (Chromium never proxies it); every other
		// host, and its name, goes to a proxy on the discard port, which
		// refuses: nothing leaves the machine.
		chromedp.ProxyServer("127.0.0.1:9"),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("allow-file-access-from-files", true),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	output := &lockedBuffer{}
	opts = append(opts, chromedp.CombinedOutput(output))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &Browser{t: t, ctx: ctx}
	// The first Run starts the browser; it must not carry a timeout (the
	// timeout would end the browser).
	start := time.Now()
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium %s: %v\n%s", path, err, output.String())
		}
	case <-time.After(StartTimeout):
		cancel()
		t.Fatalf("chromium %s did not start within %v\n%s", path, StartTimeout, output.String())
	}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("listen to chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("enable network events: %v", err)
	}
	t.Logf("chromium %s started in %v", path, time.Since(start).Round(time.Millisecond))
	return b
}

// record keeps the URL of every request and every uncaught exception and
// console error. It runs in chromedp's read loop: it only appends.
func (b *Browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	case *network.EventLoadingFailed:
		b.problems = append(b.problems, fmt.Sprintf("request %s failed: %s", e.RequestID, e.ErrorText))
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			var parts []string
			for _, a := range e.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, strings.Trim(string(a.Value), `"`))
				}
			}
			b.problems = append(b.problems, "console.error: "+strings.Join(parts, " "))
		}
	}
}

// Context is the tab's chromedp context, for actions the helpers lack;
// bound it (context.WithTimeout) before running them.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs chromedp actions within Timeout, failing the test on an error.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v%s", what, err, b.problemsSuffix())
	}
}

// Navigate opens url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.Do("navigate to "+url, chromedp.Navigate(url))
}

// WaitVisible waits until an element matching the CSS selector is visible.
func (b *Browser) WaitVisible(selector string) {
	b.t.Helper()
	b.Do("wait for "+selector, chromedp.WaitVisible(chromedp.CSS(selector)))
}

// Click clicks the first element matching the CSS selector.
func (b *Browser) Click(selector string) {
	b.t.Helper()
	b.Do("click "+selector, chromedp.Click(chromedp.CSS(selector)))
}

// Type replaces the value of the input matching the selector with text and
// fires its input event, as typing would.
func (b *Browser) Type(selector, text string) {
	b.t.Helper()
	b.Do("type into "+selector, chromedp.WaitVisible(chromedp.CSS(selector)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(el => { el.focus(); el.value = %s; el.dispatchEvent(new Event('input', {bubbles: true})) })(document.querySelector(%s))`,
				jsString(text), jsString(selector)))(ctx, t)
			return err
		}))
}

// Text is the visible text of the first element matching the selector.
func (b *Browser) Text(selector string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(selector)))
	if err != nil {
		b.t.Fatalf("text of %s: %v%s", selector, err, b.problemsSuffix())
	}
	return s
}

// Eval evaluates a JavaScript expression (awaiting it if it is a promise)
// and decodes its JSON value into T.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v%s", expr, err, b.problemsSuffix())
	}
	return v
}

// WaitTrue waits up to within for the JavaScript expression to be truthy,
// checking it on every animation frame (so a page change is seen within a
// frame of happening), and fails the test when it is not.
func (b *Browser) WaitTrue(expr string, within time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+Timeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within))); err != nil {
		b.t.Fatalf("waiting %v for %s: %v%s", within, expr, err, b.problemsSuffix())
	}
}

// Screenshot writes a PNG of the viewport to path.
func (b *Browser) Screenshot(path string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
}

// Offline cuts the tab's network, loopback included (files still open),
// from now on.
func (b *Browser) Offline() {
	b.t.Helper()
	b.Do("go offline", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Call(ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
			MatchedNetworkConditions: []*network.Conditions{{Offline: true, DownloadThroughput: -1, UploadThroughput: -1}},
		})
		return err
	}))
}

// Requests are the URLs the page asked for so far, the page itself
// included, in order.
func (b *Browser) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// Problems are the page's uncaught exceptions, console errors and failed
// requests so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

func (b *Browser) problemsSuffix() string {
	p := b.Problems()
	if len(p) == 0 {
		return ""
	}
	return "\npage problems:\n  " + strings.Join(p, "\n  ")
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FileURL is the file:// URL of a local path.
func FileURL(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// ScreenshotPath is where a test keeps a screenshot called name: in
// $KPROXY_SCREENSHOTS when set (to look at them, or to refresh the docs'
// pictures), else in the test's temporary directory.
func ScreenshotPath(t testing.TB, name string) string {
	if dir := os.Getenv("KPROXY_SCREENSHOTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("screenshot directory: %v", err)
		}
		return filepath.Join(dir, name)
	}
	return filepath.Join(t.TempDir(), name)
}
