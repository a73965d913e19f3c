package harness

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func goalByID(t *testing.T, id string) Goal {
	t.Helper()
	for _, g := range Goals {
		if g.ID == id {
			return g
		}
	}
	t.Fatalf("no goal %q", id)
	return Goal{}
}

// A goal is judged on kproxy's ratio to its peer (or kproxy's own value)
// against its bound, floor or ceiling, and only in a run of its shape.
func TestGoalJudge(t *testing.T) {
	ports := runShape{ports: 100, size: 64, burst: 1}
	for _, c := range []struct {
		name, goal string
		run        runShape
		values     map[string]float64
		verdict    string
	}{
		{"floor met", "conn-rate", ports, map[string]float64{TargetKproxy: 1100, TargetHAProxyTuned: 1000}, "met"},
		{"floor not met", "conn-rate", ports, map[string]float64{TargetKproxy: 1099, TargetHAProxyTuned: 1000}, "not met"},
		{"ceiling met", "conn-cpu", ports, map[string]float64{TargetKproxy: 90, TargetHAProxyTuned: 100}, "met"},
		{"ceiling not met", "conn-cpu", ports, map[string]float64{TargetKproxy: 91, TargetHAProxyTuned: 100}, "not met"},
		// The plain HAProxy does not stand in for the tuned one.
		{"no peer", "conn-rate", ports, map[string]float64{TargetKproxy: 1100, TargetHAProxy: 900}, "n/a: no haproxy-tuned in this run (--compare haproxy-tuned)"},
		{"another size", "keepalive-cpu", runShape{size: 1024}, map[string]float64{TargetKproxy: 1, TargetHAProxyTuned: 100}, "n/a: this run has 1024 B"},
		{"udp against nginx", "udp-nginx-rate", runShape{size: 64, burst: 64}, map[string]float64{TargetKproxy: 119, TargetNginx: 100}, "not met"},
		{"startup against HAProxy", "startup-listening-haproxy", runShape{ports: 10_000}, map[string]float64{TargetKproxy: 0.5, TargetHAProxy: 0.55}, "met"},
		{"udp one at a time", "udp-rate", ports, map[string]float64{TargetKproxy: 100, TargetDirect: 100}, "n/a: this run has no --udp-burst"},
		{"udp at full rate", "udp-rate", runShape{size: 64, burst: 64}, map[string]float64{TargetKproxy: 60, TargetDirect: 100}, "met"},
		{"udp CPU over the relay", "udp-cpu", runShape{size: 64, burst: 64}, map[string]float64{TargetKproxy: 2.7, TargetRelay: 4.5}, "not met"},
		// A target stated for 10,000 ports is not met by a short run.
		{"startup, few ports", "startup-listening", runShape{ports: 200}, map[string]float64{TargetKproxy: 0.05}, "n/a: this run has 200 ports"},
		{"startup at 10,000", "startup-listening", runShape{ports: 10_000}, map[string]float64{TargetKproxy: 1.2, TargetHAProxy: 0.5}, "not met"},
		{"idle RSS, not idle", "startup-idle-rss", runShape{ports: 10_000}, map[string]float64{TargetKproxy: 11}, "n/a: this run has no --idle-wait"},
		{"idle RSS", "startup-idle-rss", runShape{ports: 10_000, idle: true}, map[string]float64{TargetKproxy: 11.7}, "met"},
		{"churn at its shape", "churn-file-1000", runShape{source: ChurnFile, services: 1000, rate: 20, made: 19.9}, map[string]float64{TargetKproxy: 500}, "met"},
		{"churn elsewhere", "churn-file-1000", runShape{source: ChurnFile, services: 200, rate: 20, made: 20}, map[string]float64{TargetKproxy: 5}, "n/a: this run has 200 services"},
		// A driver that fell behind measured a lighter churn than the target's.
		{"churn rate not made", "churn-remote", runShape{source: ChurnRemote, services: 10_000, rate: 1000, made: 503}, map[string]float64{TargetKproxy: 50}, "n/a: this run has only 503 changes/s made"},
		{"no failure", "churn-remote-failed", runShape{source: ChurnRemote, services: 10_000, rate: 1000, made: 999}, map[string]float64{TargetKproxy: 0}, "met"},
		{"a failure", "churn-remote-failed", runShape{source: ChurnRemote, services: 10_000, rate: 1000, made: 999}, map[string]float64{TargetKproxy: 1}, "not met"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := goalByID(t, c.goal)
			got := g.judge(c.run, figure("f", "", false, c.values))
			verdict := got.Verdict
			if got.Why != "" {
				verdict += ": " + got.Why
			}
			if verdict != c.verdict {
				t.Fatalf("%s on %v: %q, want %q", g, c.values, verdict, c.verdict)
			}
			if got.Judged != (c.verdict == "met" || c.verdict == "not met") || got.Met != (c.verdict == "met") {
				t.Errorf("judged %v, met %v for verdict %q", got.Judged, got.Met, got.Verdict)
			}
		})
	}
}

func TestGoalString(t *testing.T) {
	for id, want := range map[string]string{
		"conn-rate":           "≥ 1.1× haproxy-tuned at 64 B",
		"udp-cpu":             "≤ 0.5× relay at 64 B, --udp-burst",
		"startup-idle-rss":    "≤ 12 KiB at 10,000 ports, idle",
		"churn-file-10000":    "≤ 1,000 ms at 10,000 services, 100 changes/s",
		"churn-remote-failed": "none at 10,000 services, 1,000 changes/s",
		"bulk-rate":           "≥ 1.5× haproxy-tuned",
	} {
		if got := goalByID(t, id).String(); got != want {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
}

// Each goal lands on the figure names its scenario makes, the scenario
// lists all of its goals (those without a figure in the run too), and the
// table and the JSON carry them.
func TestGoalsInReport(t *testing.T) {
	o := Options{Ports: 10_000, IdleWait: 10 * time.Second}
	o.Defaults()
	startup := &ScenarioResult{Name: "startup", Figures: []Figure{
		figure("10000 ports: all listening", "s", true, map[string]float64{TargetKproxy: 0.9, TargetHAProxy: 1.0, TargetHAProxyMinimal: 0.4}),
		figure("10000 ports: RSS per port above one port", "KiB", true, map[string]float64{TargetKproxy: 16}),
		figure("10000 ports: RSS per port above one port, idle 10s", "KiB", true, map[string]float64{TargetKproxy: 12.5}),
	}}
	judgeGoals(&o, startup)
	ports := &ScenarioResult{Name: "ports", Figures: []Figure{
		figure("conn: requests/s", "req/s", false, map[string]float64{TargetKproxy: 5000, TargetHAProxyTuned: 4000}),
		figure("conn: latency p50", "µs", true, map[string]float64{TargetKproxy: 5000, TargetHAProxy: 4000}),
	}}
	judgeGoals(&o, ports)
	if g := startup.Figures[0].Goals; len(g) != 3 || g[0].Verdict != "met" || g[1].Verdict != "met" || g[2].Verdict != "not met" {
		t.Errorf("all listening: %+v", g)
	}
	if g := startup.Figures[1].Goals; len(g) != 0 {
		t.Errorf("RSS per port while probed is not the idle target's figure: %+v", g)
	}
	if g := startup.Figures[2].Goals; len(g) != 1 || g[0].Verdict != "not met" {
		t.Errorf("idle RSS: %+v", g)
	}
	if g := ports.Figures[0].Goals; len(g) != 1 || g[0].Verdict != "met" || g[0].ID != "conn-rate" {
		t.Errorf("conn rate: %+v", g)
	}
	if len(ports.Figures[1].Goals) != 0 {
		t.Errorf("latency has no goal: %+v", ports.Figures[1].Goals)
	}
	verdicts := map[string]string{}
	for _, g := range ports.Goals {
		verdicts[g.ID] = g.Verdict
	}
	if len(ports.Goals) != 11 || verdicts["conn-rate"] != "met" || verdicts["bulk-rate"] != "not in this run" {
		t.Errorf("ports' goals: %v", verdicts)
	}

	rep := &Report{Scenarios: []*ScenarioResult{startup, ports}}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(table.String(), "\n")
	if !strings.HasSuffix(strings.TrimSpace(lines[0]), "goal") {
		t.Errorf("header %q: want a goal column last", lines[0])
	}
	for _, want := range []string{
		"≤ 1 s at 10,000 ports: met",
		"≤ 12 KiB at 10,000 ports, idle: not met",
		"≥ 1.1× haproxy-tuned at 64 B: met",
		"goals of these scenarios, and the run that judges each:",
		"not in this run  " + cmdPortsTCP,
		"keep-alive requests/s",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js strings.Builder
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil {
		t.Fatal(err)
	}
	if g := back.Scenarios[0].Figures[0].Goals; len(g) != 3 || !g[0].Judged || !g[0].Met || g[0].Command != cmdStartup {
		t.Errorf("JSON figure goals: %+v", g)
	}
	if len(back.Scenarios[1].Goals) != 11 {
		t.Errorf("JSON scenario goals: %+v", back.Scenarios[1].Goals)
	}
	var html strings.Builder
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<th>goal</th>", "≤ 12 KiB at 10,000 ports, idle: not met", "<code>" + cmdStartup + "</code>"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}
