package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/browsertest"
)

// chartPixels is, per chart container of a report, the pixels its ECharts
// instance drew on its canvas (-1: no instance or no canvas). A chart that
// could not draw (no library) leaves an empty container.
const chartPixels = `[...document.querySelectorAll('.charts .item')].map(el => {
	if (typeof echarts === 'undefined' || !echarts.getInstanceByDom(el)) return -1;
	const c = el.querySelector('canvas');
	if (!c) return -1;
	const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
	let n = 0;
	for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) n++;
	return n;
})`

// The HTML report opened from disk with the network off draws every chart:
// it carries its chart library, and asks for nothing but itself.
func TestReportRendersOffline(t *testing.T) {
	b := browsertest.New(t)
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sampleReport().WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	b.Offline()
	b.Navigate(browsertest.FileURL(path))
	const charts = 7 // sampleReport's
	// ECharts draws in animation frames after setOption: wait for every
	// canvas to have something on it.
	deadline := time.Now().Add(10 * time.Second)
	var px []int
	for {
		px = browsertest.Eval[[]int](b, chartPixels)
		drawn := 0
		for _, n := range px {
			if n > 0 {
				drawn++
			}
		}
		if len(px) == charts && drawn == charts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pixels drawn per chart %v, want %d charts each with pixels; page problems: %q", px, charts, b.Problems())
		}
		b.WaitTrue(`new Promise(r => requestAnimationFrame(() => r(true)))`, time.Second)
	}
	for _, u := range b.Requests() {
		if !strings.HasPrefix(u, "file:") {
			t.Errorf("the report asked for %s", u)
		}
	}
	b.Screenshot(browsertest.ScreenshotPath(t, "bench-report.png"))
}
