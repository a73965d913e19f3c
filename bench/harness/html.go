package harness

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/go-echarts/go-echarts/v2/render"
)

// echartsJS is the ECharts library the charts need (echarts/README.md),
// inlined into every report: a report opened from disk on a node with no
// network draws its charts, and asks for nothing.
//
//go:embed echarts/echarts.min.js
var echartsJS string

// WriteHTML writes the report: per scenario its figures as a table, notes,
// and charts made with go-echarts.
func (r *Report) WriteHTML(w io.Writer) error {
	type section struct {
		Name, Error, Skipped string
		Table                template.HTML
		Goals                []GoalResult
		Notes                []string
		Charts               []template.HTML
	}
	var sections []section
	for _, s := range r.Scenarios {
		sec := section{Name: s.Name, Error: s.Error, Skipped: s.Skipped, Notes: s.Notes, Table: figureTable(s.Figures, r.peers()), Goals: s.Goals}
		for _, c := range scenarioCharts(s) {
			snip := c.RenderSnippet()
			sec.Charts = append(sec.Charts, template.HTML(snip.Element+snip.Script))
		}
		sections = append(sections, sec)
	}
	return reportPage.Execute(w, map[string]any{"R": r, "Sections": sections, "JS": template.JS(echartsJS)})
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kproxy-bench</title>
<script>{{.JS}}</script>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}.err{color:#b00}.charts{display:flex;flex-wrap:wrap}</style>
</head><body>
<h1>kproxy-bench</h1>
<p><code>{{.R.Command}}</code><br>kproxy {{.R.Version}}{{if .R.BaselineVersion}} (baseline: {{.R.BaselineVersion}}){{end}}, {{.R.Started.Format "2006-01-02 15:04 UTC"}}; {{.R.Host.OS}}/{{.R.Host.Arch}}, {{.R.Host.CPUs}} CPUs, kernel {{.R.Host.Kernel}}, fd limit {{.R.Host.FDMax}}.
Ratios compare figures measured in the same run.</p>
{{range .Sections}}<h2>{{.Name}}</h2>
{{if .Error}}<p class="err">failed: {{.Error}}</p>{{end}}
{{if .Skipped}}<p>skipped: {{.Skipped}}</p>{{end}}
{{.Table}}
{{if .Goals}}<table><tr><th>goal</th><th>target</th><th>this run</th><th>judged by</th></tr>{{range .Goals}}<tr><td>{{.Name}}</td><td>{{.Goal}}</td><td>{{.Verdict}}</td><td><code>{{.Command}}</code></td></tr>{{end}}</table>{{end}}
{{range .Notes}}<p>{{.}}</p>{{end}}
<div class="charts">{{range .Charts}}<div>{{.}}</div>{{end}}</div>
{{end}}</body></html>
`))

// figureTable is the scenario's rows of the text table, as HTML.
func figureTable(figs []Figure, peers []string) template.HTML {
	if len(figs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("<table><tr><th>figure</th><th>unit</th>")
	for _, p := range peers {
		b.WriteString("<th>" + p + "</th>")
	}
	b.WriteString("<th>kproxy</th>")
	for _, p := range peers {
		b.WriteString("<th>kproxy/" + p + "</th>")
	}
	goals := slices.ContainsFunc(figs, func(f Figure) bool { return len(f.Goals) > 0 })
	if goals {
		b.WriteString("<th>goal</th>")
	}
	b.WriteString("</tr>")
	for _, f := range figs {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td>", template.HTMLEscapeString(f.Name), template.HTMLEscapeString(f.Unit))
		for _, t := range append(slices.Clone(peers), TargetKproxy) {
			b.WriteString("<td>" + cellValue(f, t) + "</td>")
		}
		for _, t := range peers {
			b.WriteString("<td>" + ratioValue(f, t) + "</td>")
		}
		if goals {
			b.WriteString("<td>" + template.HTMLEscapeString(goalCell(f)) + "</td>")
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	return template.HTML(b.String())
}

// scenarioCharts are the charts of one scenario.
func scenarioCharts(s *ScenarioResult) []render.Renderer {
	var out []render.Renderer
	for _, mode := range modesOf(s.Latency) {
		out = append(out, latencyChart(s.Name+" "+mode+": latency", s.Latency, mode))
	}
	if len(s.Rounds) > 0 && (s.Name == "ports" || s.Name == ScenarioClientAddress) {
		out = append(out, roundBars("requests/s (median of rounds)", s.Rounds, func(r Round) float64 { return r.OpsPerSecond }),
			roundBars("proxy CPU µs per request (median)", s.Rounds, func(r Round) float64 { return r.CPUMicrosPerOp }))
	}
	if len(s.Ready) > 0 {
		series := map[string][][2]float64{}
		var names []string
		for _, c := range s.Ready {
			name := c.Target + " " + c.Kind
			names = append(names, name)
			step := max(1, len(c.Seconds)/500)
			for i := 0; i < len(c.Seconds); i += step {
				series[name] = append(series[name], [2]float64{c.Seconds[i], float64(i + 1)})
			}
			series[name] = append(series[name], [2]float64{c.Seconds[len(c.Seconds)-1], float64(len(c.Seconds))})
		}
		out = append(out, lineXY("ports listening and forwarding since the process started", "s", "ports", names, series))
	}
	if s.Churn != nil {
		out = append(out, latencyChart("change → applied latency", []LatencyCurve{s.Churn.Latency}, s.Churn.Latency.Mode))
		var pts [][2]float64
		for _, p := range s.Churn.PerSecond {
			pts = append(pts, [2]float64{float64(p.Second), p.Max})
		}
		out = append(out, lineXY("worst change → applied latency, by second of the churn", "s", "ms", []string{"kproxy"}, map[string][][2]float64{"kproxy": pts}))
	}
	if s.Chaos != nil {
		d := s.Chaos
		bar := charts.NewBar()
		bar.SetGlobalOptions(charts.WithTitleOpts(opts.Title{Title: "requests during the storm"}), charts.WithLegendOpts(opts.Legend{Top: "bottom"}))
		bar.SetXAxis([]string{"crashed ports", "untouched ports"}).
			AddSeries("ok", []opts.BarData{{Value: d.RequestsCrashed - d.FailedCrashed}, {Value: d.RequestsUntouched - d.FailedUntouched}}).
			AddSeries("failed", []opts.BarData{{Value: d.FailedCrashed}, {Value: d.FailedUntouched}})
		out = append(out, bar)
	}
	if len(s.Timeline) > 1 {
		out = append(out, timelineCharts(s)...)
	}
	return out
}

// timelineCharts: throughput (per target) and each process's RSS, fds,
// goroutines and restarts over time.
func timelineCharts(s *ScenarioResult) []render.Renderer {
	tl := s.Timeline
	var targets []string
	rate := map[string][][2]float64{}
	for i := 1; i < len(tl); i++ {
		a, b := tl[i-1], tl[i]
		if b.T <= a.T || b.T < a.T || b.Ops < a.Ops {
			continue // a new process's timeline starts over
		}
		if b.Target == "" || a.Target != b.Target {
			continue
		}
		if rate[b.Target] == nil {
			targets = append(targets, b.Target)
		}
		rate[b.Target] = append(rate[b.Target], [2]float64{b.T, float64(b.Ops-a.Ops) / (b.T - a.T)})
	}
	var out []render.Renderer
	if len(targets) > 0 {
		out = append(out, lineXY(s.Name+": requests/s over time", "s", "req/s", targets, rate))
	}
	var procs []string
	seen := map[string]bool{}
	for _, smp := range tl {
		for name := range smp.Procs {
			if !seen[name] {
				seen[name] = true
				procs = append(procs, name)
			}
		}
	}
	for _, m := range []struct {
		title, unit string
		get         func(ProcPoint) float64
	}{
		{"RSS", "MiB", func(p ProcPoint) float64 { return float64(p.RSS) / (1 << 20) }},
		{"open fds", "fds", func(p ProcPoint) float64 { return float64(p.FDs) }},
		{"goroutines", "goroutines", func(p ProcPoint) float64 { return float64(p.Goroutines) }},
		{"actor restarts", "restarts", func(p ProcPoint) float64 { return float64(p.Restarts) }},
	} {
		series := map[string][][2]float64{}
		any := false
		for _, smp := range tl {
			for name, p := range smp.Procs {
				v := m.get(p)
				any = any || v != 0
				series[name] = append(series[name], [2]float64{smp.T, v})
			}
		}
		if any {
			out = append(out, lineXY(s.Name+": "+m.title+" over time", "s", m.unit, procs, series))
		}
	}
	return out
}

func modesOf(curves []LatencyCurve) []string {
	var modes []string
	for _, c := range curves {
		if len(modes) == 0 || modes[len(modes)-1] != c.Mode {
			modes = append(modes, c.Mode)
		}
	}
	return modes
}

// latencyChart: one line per target over the reported percentiles, on a
// log scale (tails are orders of magnitude above medians).
func latencyChart(title string, curves []LatencyCurve, mode string) *charts.Line {
	line := charts.NewLine()
	line.SetGlobalOptions(charts.WithTitleOpts(opts.Title{Title: title}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "percentile"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "µs", Type: "log"}))
	var xs []string
	for _, p := range reportedPercentiles {
		xs = append(xs, "p"+formatNumber(p))
	}
	line.SetXAxis(xs)
	for _, c := range curves {
		if c.Mode != mode {
			continue
		}
		var data []opts.LineData
		for _, p := range c.Percentiles {
			data = append(data, opts.LineData{Value: p.Micros})
		}
		line.AddSeries(c.Target, data)
	}
	return line
}

// roundBars: the median per mode and target.
func roundBars(title string, rounds []Round, get func(Round) float64) *charts.Bar {
	var modes, targets []string
	vals := map[[2]string][]float64{}
	for _, r := range rounds {
		if !contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
		if !contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
		if v := get(r); v > 0 {
			vals[[2]string{r.Mode, r.Target}] = append(vals[[2]string{r.Mode, r.Target}], v)
		}
	}
	bar := charts.NewBar()
	bar.SetGlobalOptions(charts.WithTitleOpts(opts.Title{Title: title}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}))
	bar.SetXAxis(modes)
	for _, t := range targets {
		var data []opts.BarData
		for _, m := range modes {
			data = append(data, opts.BarData{Value: finite(median(vals[[2]string{m, t}]))})
		}
		bar.AddSeries(t, data)
	}
	return bar
}

// lineXY: series of (x, y) points on value axes.
func lineXY(title, xName, yName string, names []string, series map[string][][2]float64) *charts.Line {
	line := charts.NewLine()
	line.SetGlobalOptions(charts.WithTitleOpts(opts.Title{Title: title}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
		charts.WithXAxisOpts(opts.XAxis{Name: xName, Type: "value"}),
		charts.WithYAxisOpts(opts.YAxis{Name: yName, Type: "value"}))
	for _, n := range names {
		var data []opts.LineData
		for _, p := range series[n] {
			data = append(data, opts.LineData{Value: []any{p[0], finite(p[1])}})
		}
		line.AddSeries(n, data, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
	}
	return line
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
