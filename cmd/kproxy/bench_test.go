package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/bench/harness"
)

// TestBenchSmoke runs every scenario of `kproxy bench` through the real
// command, small and short, with this test binary as the kproxy under
// test (a separate process) and HAProxy where it is installed: the
// harness keeps working, and kproxy forwards without failures under it.
func TestBenchSmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness reads /proc")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(asKproxyEnv, "1") // inherited by the kproxy processes the harness starts
	dir := t.TempDir()
	compare := "direct"
	if _, err := exec.LookPath("haproxy"); err == nil {
		compare += ",haproxy"
	}
	jsonPath, htmlPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.html")
	var out bytes.Buffer
	code := kproxyMain([]string{"bench", "all", "--ports", "20", "--clients", "4", "--rounds", "1", "--duration", "500ms",
		"--churn-rate", "10", "--load-rate", "200", "--compare", compare + ",relay", "--kproxy", exe, "--quiet",
		"--work-dir", filepath.Join(dir, "work"), "--json", jsonPath, "--html", htmlPath}, &out)
	if code != 0 {
		logs, _ := filepath.Glob(filepath.Join(dir, "work", "*", "*.log"))
		for _, l := range logs {
			raw, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, raw[max(0, len(raw)-3000):])
		}
		t.Fatalf("kproxy bench all: exit %d\n%s", code, out.String())
	}
	t.Logf("\n%s", out.String())
	for _, s := range harness.Scenarios {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the table has no %s rows", s)
		}
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep harness.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != len(harness.Scenarios) {
		t.Fatalf("%d scenarios in the JSON, want %d", len(rep.Scenarios), len(harness.Scenarios))
	}
	for _, s := range rep.Scenarios {
		if s.Error != "" || len(s.Figures) == 0 || len(s.Timeline) == 0 {
			t.Errorf("%s: error %q, %d figures, %d samples", s.Name, s.Error, len(s.Figures), len(s.Timeline))
		}
		for _, r := range s.Rounds {
			if r.Ops == 0 || r.Errors != 0 {
				t.Errorf("%s %s %s round %d: %d ok, %d failed %v", s.Name, r.Mode, r.Target, r.Round, r.Ops, r.Errors, r.ErrSamples)
			}
			if r.Target != harness.TargetDirect && r.CPUSeconds == 0 && r.Ops > 1000 {
				t.Errorf("%s %s %s: no CPU time read from /proc", s.Name, r.Mode, r.Target)
			}
		}
		switch s.Name {
		case "churn":
			if c := s.Churn; c == nil || c.Applied == 0 || c.NotApplied != 0 || c.FailedReqs != 0 {
				t.Errorf("churn: %+v", c)
			}
		case "chaos":
			if c := s.Chaos; c == nil || c.Crashes == 0 || c.FailedCrashed+c.FailedUntouched != 0 {
				t.Errorf("chaos: %+v", c)
			}
		}
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(html, []byte("echarts.init")); n < 10 {
		t.Errorf("the HTML report has %d charts", n)
	}
}
