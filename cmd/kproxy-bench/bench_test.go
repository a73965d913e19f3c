package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/bench/harness"
	"github.com/kproxy/kproxy/test/binarytest"
)

// TestBenchSmoke runs every scenario of kproxy-bench through the real
// command, small and short, with a kproxy built from this tree as the
// kproxy under test (a separate process) and as the baseline it is
// compared with, and HAProxy where it is installed: the harness keeps
// working, kproxy forwards without failures under it, and the baseline
// is measured beside it in startup and ports.
func TestBenchSmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness reads /proc")
	}
	kproxy := binarytest.Build(t)
	t.Setenv(asBenchEnv, "1") // inherited by the relay process, this test binary
	dir := t.TempDir()
	compare := "direct"
	if _, err := exec.LookPath("haproxy"); err == nil {
		compare += ",haproxy"
	}
	jsonPath, htmlPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.html")
	var out bytes.Buffer
	code := benchMain([]string{"all", "--ports", "20", "--clients", "4", "--rounds", "1", "--duration", "500ms",
		"--churn-rate", "10", "--load-rate", "200", "--compare", compare + ",relay", "--kproxy", kproxy, "--baseline-kproxy", kproxy,
		"--quiet", "--work-dir", filepath.Join(dir, "work"), "--json", jsonPath, "--html", htmlPath}, &out)
	if code != 0 {
		logs, _ := filepath.Glob(filepath.Join(dir, "work", "*", "*.log"))
		for _, l := range logs {
			raw, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, raw[max(0, len(raw)-3000):])
		}
		t.Fatalf("kproxy-bench all: exit %d\n%s", code, out.String())
	}
	t.Logf("\n%s", out.String())
	for _, s := range append(slices.Clone(harness.Scenarios), "kproxy/baseline", "goal", "judged by", "kproxy-bench startup --ports 10000") {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the table has no %s", s)
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
		if s.Skipped != "" && s.Name == harness.ScenarioClientAddress && os.Geteuid() != 0 {
			continue // it needs root; TestBenchClientAddress checks it
		}
		if s.Error != "" || s.Skipped != "" || len(s.Figures) == 0 || len(s.Timeline) == 0 {
			t.Errorf("%s: error %q, skipped %q, %d figures, %d samples", s.Name, s.Error, s.Skipped, len(s.Figures), len(s.Timeline))
		}
		for _, r := range s.Rounds {
			if r.Ops == 0 || r.Errors != 0 {
				t.Errorf("%s %s %s round %d: %d ok, %d failed %v", s.Name, r.Mode, r.Target, r.Round, r.Ops, r.Errors, r.ErrSamples)
			}
			if r.Target != harness.TargetDirect && r.CPUSeconds == 0 && r.Ops > 1000 {
				t.Errorf("%s %s %s: no CPU time read from /proc", s.Name, r.Mode, r.Target)
			}
		}
		// The baseline is measured in every figure of startup and ports
		// that kproxy has: the same rounds, the same readings.
		if s.Name == "startup" || s.Name == "ports" {
			for _, f := range s.Figures {
				_, k := f.Values[harness.TargetKproxy]
				_, b := f.Values[harness.TargetBaseline]
				if strings.Contains(f.Name, "CPU") {
					// /proc counts CPU in 10 ms ticks: this smoke run's
					// tiny loads can read none on either side.
					continue
				}
				if k != b {
					t.Errorf("%s %q: kproxy measured %v, baseline measured %v", s.Name, f.Name, k, b)
				}
			}
			if n := countRounds(s.Rounds, harness.TargetBaseline); s.Name == "ports" && n != countRounds(s.Rounds, harness.TargetKproxy) {
				t.Errorf("ports: %d baseline rounds, want as many as kproxy's", n)
			}
		}
		// Every goal of the scenario is listed, and those whose figures
		// this run makes land on them (the figures' names and the goals'
		// patterns agree); this run is too small to judge the startup and
		// churn ones, which must say so rather than pass.
		want := map[string]bool{}
		for _, g := range harness.Goals {
			if g.Scenario == s.Name {
				want[g.ID] = true
			}
		}
		for _, g := range s.Goals {
			delete(want, g.ID)
			onFigure := !strings.HasPrefix(g.ID, "churn-remote") && g.ID != "churn-kube" && g.ID != "startup-idle-rss"
			if onFigure == (g.Verdict == "not in this run") {
				t.Errorf("%s: goal %s: %s %s", s.Name, g.ID, g.Verdict, g.Why)
			}
			if (s.Name == "startup" || s.Name == "churn") && g.Judged {
				t.Errorf("%s: goal %s judged (%s) on a run of 20 ports", s.Name, g.ID, g.Verdict)
			}
		}
		if len(want) > 0 {
			t.Errorf("%s: goals %v not listed", s.Name, want)
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

func countRounds(rounds []harness.Round, target string) int {
	n := 0
	for _, r := range rounds {
		if r.Target == target {
			n++
		}
	}
	return n
}

// TestBenchChurnRemoteSmoke runs the churn through a core the harness
// feeds (--churn-via remote), small and short: kproxy run follows the core
// over remoting, every change reaches its connections, no request fails.
func TestBenchChurnRemoteSmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness reads /proc")
	}
	kproxy := binarytest.Build(t)
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	var out bytes.Buffer
	code := benchMain([]string{"churn", "--churn-via", "remote", "--services", "20", "--clients", "4", "--duration", "1s",
		"--churn-rate", "20", "--load-rate", "200", "--kproxy", kproxy, "--quiet", "--work-dir", filepath.Join(dir, "work"), "--json", jsonPath}, &out)
	if code != 0 {
		t.Fatalf("kproxy-bench churn --churn-via remote: exit %d\n%s", code, out.String())
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep harness.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Error != "" {
		t.Fatalf("scenarios %+v", rep.Scenarios)
	}
	c := rep.Scenarios[0].Churn
	if c == nil || c.Source != "remote" || c.Applied == 0 || c.NotApplied != 0 || c.FailedReqs != 0 {
		t.Fatalf("churn: %+v\n%s", c, out.String())
	}
	// The remote churn's goals are on its figures, not judged at 20 services.
	for _, g := range rep.Scenarios[0].Goals {
		if strings.HasPrefix(g.ID, "churn-remote") && (g.Verdict != "n/a" || !strings.Contains(g.Why, "20 services")) {
			t.Errorf("goal %s: %s: %s", g.ID, g.Verdict, g.Why)
		}
	}
}
