package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBenchHollowSmoke runs the hollow scenario through the real command,
// tiny: a core serving 20 hollow nodes in one child process (this test
// binary as kproxy-bench hollow-host), every node gets every change.
func TestBenchHollowSmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness reads /proc")
	}
	t.Setenv(asBenchEnv, "1") // inherited by the hollow host, this test binary
	var out bytes.Buffer
	code := benchMain([]string{"hollow", "--hollow-nodes", "20", "--services", "200", "--churn-rate", "20", "--duration", "3s", "--quiet"}, &out)
	if code != 0 {
		t.Fatalf("kproxy-bench hollow: exit %d\n%s", code, out.String())
	}
	t.Logf("\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the head, its rule and a row", len(lines))
	}
	cells := strings.Split(strings.Trim(lines[2], "| "), " | ")
	if len(cells) != 16 || cells[0] != "20" || cells[1] != "200" || !strings.HasSuffix(cells[3], "/s") || !strings.HasPrefix(cells[4], "60 in ") || cells[8] != "0" {
		t.Errorf("row %q: want 20 nodes, 200 services, the core's idle CPU per node, 60 changes, 0 lost", lines[2])
	}
	if d, err := time.ParseDuration(cells[10]); err != nil || d <= 0 {
		t.Errorf("row %q: node CPU per change %q, want a duration above 0 (the hosts' CPU from /proc)", lines[2], cells[10])
	}
}
