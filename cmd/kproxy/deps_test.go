package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// benchmarkOnly are what only the benchmark harness (cmd/kproxy-bench)
// and tests may link: its packages, by import path prefix, its charting
// and histogram modules, and the browser-test harness; and the image
// builder (cmd/kproxy-image) with go-containerregistry.
var benchmarkOnly = []string{
	"github.com/kproxy/kproxy/test/browsertest",
	"github.com/chromedp/",
	"github.com/kproxy/kproxy/bench/",
	"github.com/go-echarts/",
	"github.com/hdrhistogram/",
	"github.com/kproxy/kproxy/cmd/kproxy-image",
	"github.com/google/go-containerregistry/",
}

// The node agent links no benchmark code: what `go list -deps` lists for
// it, for each OS it ships on, is what its binary holds (`go version -m
// bin/kproxy` shows the same modules).
func TestNodeAgentLinksNoBenchmark(t *testing.T) {
	for _, goos := range []string{"linux", "windows"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "github.com/kproxy/kproxy/cmd/kproxy")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		cancel()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("GOOS=%s go list -deps: %v\n%s", goos, err, msg)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 100 { // client-go alone is more: the listing is whole
			t.Fatalf("GOOS=%s: %d packages listed, want the node agent's whole graph", goos, len(lines))
		}
		for _, line := range lines {
			pkg, mod, _ := strings.Cut(line, " ")
			for _, bad := range benchmarkOnly {
				if strings.HasPrefix(strings.ToLower(pkg), bad) || strings.HasPrefix(strings.ToLower(mod)+"/", bad) {
					t.Errorf("GOOS=%s: kproxy links %s (module %s), which only kproxy-bench, kproxy-image and tests may", goos, pkg, mod)
				}
			}
		}
	}
}
