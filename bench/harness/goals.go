package harness

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Goal is one of kproxy's performance targets: a figure's value for
// kproxy, or its ratio to a peer measured in the same run, against a
// bound. A target is stated for a shape of run (10,000 ports, 1,000
// services at 20 changes/s, 64-byte datagrams at full rate); a run of
// another shape does not judge it, whatever its figure.
type Goal struct {
	ID       string         // stable, for the JSON
	Scenario string         // the scenario whose figures it judges
	Name     string         // what it is about, for people
	Figure   *regexp.Regexp // the figures it applies to, by name
	Peer     string         // the ratio's denominator; "" judges kproxy's own value
	AtLeast  bool           // the bound is a floor, else a ceiling
	Bound    float64
	Unit     string // of Bound, when Peer is ""
	Shape    Shape
	Command  string // a command whose run has the shape
}

// Shape is the run a goal is stated for; a zero field matches any run.
type Shape struct {
	Ports    int     // service ports, exactly
	Size     int     // request bytes
	Burst    bool    // udp: datagrams sent in bursts (--udp-burst above 1), a datagram per call (no --udp-gso)
	Idle     bool    // startup: sizes measured idle (--idle-wait)
	Source   string  // churn: how the changes reach kproxy
	Services int     // churn: services, exactly
	Rate     float64 // churn: changes per second asked, and made
}

// madeShare is how much of a churn's asked rate must have been made for
// the run to stand for that rate: a driver that fell behind measured a
// lighter churn than the goal's.
const madeShare = 0.95

// Goals are kproxy's targets, each judged where a run has its shape.
var Goals = []Goal{
	// Per operation, against HAProxy tuned as its manual advises.
	{ID: "conn-rate", Scenario: "ports", Name: "new connections/s", Figure: exact("conn: requests/s"),
		Peer: TargetHAProxyTuned, AtLeast: true, Bound: 1.1, Shape: Shape{Size: 64}, Command: cmdPortsTCP},
	{ID: "conn-cpu", Scenario: "ports", Name: "CPU µs per connection", Figure: exact("conn: CPU per request"),
		Peer: TargetHAProxyTuned, Bound: 0.9, Shape: Shape{Size: 64}, Command: cmdPortsTCP},
	{ID: "keepalive-rate", Scenario: "ports", Name: "keep-alive requests/s", Figure: exact("keepalive: requests/s"),
		Peer: TargetHAProxyTuned, AtLeast: true, Bound: 1.1, Shape: Shape{Size: 64}, Command: cmdPortsTCP},
	{ID: "keepalive-cpu", Scenario: "ports", Name: "CPU µs per keep-alive request", Figure: exact("keepalive: CPU per request"),
		Peer: TargetHAProxyTuned, Bound: 0.9, Shape: Shape{Size: 64}, Command: cmdPortsTCP},
	{ID: "keepalive-p99", Scenario: "ports", Name: "keep-alive latency p99", Figure: exact("keepalive: latency p99"),
		Peer: TargetHAProxyTuned, Bound: 1.0, Shape: Shape{Size: 64}, Command: cmdPortsTCP},
	{ID: "bulk-rate", Scenario: "ports", Name: "bulk Gbit/s", Figure: exact("bulk: throughput"),
		Peer: TargetHAProxyTuned, AtLeast: true, Bound: 1.5, Command: cmdPortsTCP},
	{ID: "bulk-cpu", Scenario: "ports", Name: "CPU per GiB of bulk", Figure: exact("bulk: CPU per GiB"),
		Peer: TargetHAProxyTuned, Bound: 0.5, Command: cmdPortsTCP},
	{ID: "udp-rate", Scenario: "ports", Name: "UDP exchanges/s at full rate", Figure: exact("udp: requests/s"),
		Peer: TargetDirect, AtLeast: true, Bound: 0.6, Shape: Shape{Size: 64, Burst: true}, Command: cmdPortsUDP},
	{ID: "udp-cpu", Scenario: "ports", Name: "CPU µs per UDP exchange at full rate", Figure: exact("udp: CPU per request"),
		Peer: TargetRelay, Bound: 0.5, Shape: Shape{Size: 64, Burst: true}, Command: cmdPortsUDP},
	{ID: "udp-nginx-rate", Scenario: "ports", Name: "UDP exchanges/s at full rate, against nginx", Figure: exact("udp: requests/s"),
		Peer: TargetNginx, AtLeast: true, Bound: 1.2, Shape: Shape{Size: 64, Burst: true}, Command: cmdPortsUDP},
	{ID: "udp-nginx-cpu", Scenario: "ports", Name: "CPU µs per UDP exchange at full rate, against nginx", Figure: exact("udp: CPU per request"),
		Peer: TargetNginx, Bound: 0.8, Shape: Shape{Size: 64, Burst: true}, Command: cmdPortsUDP},
	{ID: "startup-listening", Scenario: "startup", Name: "10,000 ports listening", Figure: regexp.MustCompile(`^\d+ ports: all listening$`),
		Bound: 1, Unit: "s", Shape: Shape{Ports: 10_000}, Command: cmdStartup},
	{ID: "startup-listening-haproxy", Scenario: "startup", Name: "10,000 ports listening, against HAProxy's frontends", Figure: regexp.MustCompile(`^\d+ ports: all listening$`),
		Peer: TargetHAProxy, Bound: 1, Shape: Shape{Ports: 10_000}, Command: cmdStartup},
	{ID: "startup-listening-haproxy-minimal", Scenario: "startup", Name: "10,000 ports listening, against minimal HAProxy", Figure: regexp.MustCompile(`^\d+ ports: all listening$`),
		Peer: TargetHAProxyMinimal, Bound: 1, Shape: Shape{Ports: 10_000}, Command: cmdStartup},
	{ID: "startup-idle-rss", Scenario: "startup", Name: "RSS per idle port", Figure: regexp.MustCompile(`^\d+ ports: RSS per port above one port, idle `),
		Bound: 12, Unit: "KiB", Shape: Shape{Ports: 10_000, Idle: true}, Command: cmdStartup},
	{ID: "churn-file-1000", Scenario: "churn", Name: "file source change→applied p99", Figure: churnFigure(ChurnFile, "change→applied p99"),
		Bound: 500, Unit: "ms", Shape: Shape{Source: ChurnFile, Services: 1000, Rate: 20}, Command: "kproxy-bench churn --services 1000 --churn-rate 20 --duration 10s"},
	{ID: "churn-file-10000", Scenario: "churn", Name: "file source change→applied p99", Figure: churnFigure(ChurnFile, "change→applied p99"),
		Bound: 1000, Unit: "ms", Shape: Shape{Source: ChurnFile, Services: 10_000, Rate: 100}, Command: "kproxy-bench churn --services 10000 --churn-rate 100 --duration 10s"},
	{ID: "churn-remote", Scenario: "churn", Name: "remote source change→applied p99", Figure: churnFigure(ChurnRemote, "change→applied p99"),
		Bound: 100, Unit: "ms", Shape: Shape{Source: ChurnRemote, Services: 10_000, Rate: 1000}, Command: cmdChurnRemote},
	{ID: "churn-remote-failed", Scenario: "churn", Name: "remote source failed requests", Figure: churnFigure(ChurnRemote, "failed requests"),
		Bound: 0, Shape: Shape{Source: ChurnRemote, Services: 10_000, Rate: 1000}, Command: cmdChurnRemote},
	{ID: "churn-kube", Scenario: "churn", Name: "API server change→applied p99", Figure: churnFigure(ChurnKube, "change→applied p99"),
		Bound: 50, Unit: "ms", Shape: Shape{Source: ChurnKube, Services: 1000, Rate: 100},
		Command: "KPROXY_BENCH_CHURN_SERVICES=1000 KPROXY_BENCH_CHURN_RATE=100 KPROXY_BENCH_CHURN_DURATION=10s go test -run TestBenchChurnKube -v ./cmd/kproxy-bench/"},
}

// ChurnKube is the churn source of TestBenchChurnKube: a real API server.
const ChurnKube = "kube"

const (
	cmdPortsTCP    = "kproxy-bench ports --modes conn,keepalive,bulk --compare haproxy,haproxy-tuned --rounds 5 --duration 3s"
	cmdPortsUDP    = "kproxy-bench ports --ports 100 --modes udp --udp-burst 64 --compare direct,relay,nginx --rounds 5 --duration 3s"
	cmdStartup     = "kproxy-bench startup --ports 10000 --endpoints 1 --rounds 3 --compare haproxy,haproxy-minimal --idle-wait 10s"
	cmdChurnRemote = "kproxy-bench churn --churn-via remote --services 10000 --churn-rate 1000 --duration 10s"
)

func exact(name string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(name) + "$")
}

// churnFigure matches a churn figure of one source, whatever its label's
// services and rate (the shape says which are judged).
func churnFigure(source, name string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(source) + ` source, .*: ` + regexp.QuoteMeta(name) + "$")
}

// GoalResult is a goal as one run judged it.
type GoalResult struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Goal    string `json:"goal"` // the bound and the shape it is stated for
	Command string `json:"command"`
	// Verdict: met, not met, n/a (the run's shape is not the goal's, or a
	// peer was not measured: Why says which) or not in this run (no
	// figure for it).
	Verdict string `json:"verdict"`
	Why     string `json:"why,omitempty"`
	Judged  bool   `json:"judged"`
	Met     bool   `json:"met"`
}

// runShape is what a goal's shape is matched against.
type runShape struct {
	ports, size, burst int
	idle, gso          bool
	source             string
	services           int
	rate, made         float64
}

func shapeOf(o *Options, res *ScenarioResult) runShape {
	s := runShape{ports: o.Ports, size: o.Size, burst: o.UDPBurst, idle: o.IdleWait > 0, gso: o.UDPGSO,
		services: o.Services, rate: o.ChurnRate}
	if res.Churn != nil {
		s.source, s.made = res.Churn.Source, res.Churn.MadePerSecond
	}
	return s
}

// String is the bound with the shape it is stated for: "≥ 1.1× haproxy
// at 64 B", "≤ 500 ms at 1,000 services, 20 changes/s" (the source is the
// goal's Name's: its figures are that source's).
func (g Goal) String() string {
	op := "≤"
	if g.AtLeast {
		op = "≥"
	}
	var b string
	switch {
	case g.Peer != "":
		b = fmt.Sprintf("%s %s× %s", op, trimNumber(g.Bound), g.Peer)
	case g.Bound == 0 && !g.AtLeast:
		b = "none"
	default:
		b = fmt.Sprintf("%s %s %s", op, trimNumber(g.Bound), g.Unit)
	}
	if s := g.Shape.String(); s != "" {
		b += " at " + s
	}
	return b
}

func (s Shape) String() string {
	var parts []string
	if s.Ports > 0 {
		parts = append(parts, trimNumber(float64(s.Ports))+" ports")
	}
	if s.Services > 0 {
		parts = append(parts, trimNumber(float64(s.Services))+" services")
	}
	if s.Rate > 0 {
		parts = append(parts, trimNumber(s.Rate)+" changes/s")
	}
	if s.Size > 0 {
		parts = append(parts, strconv.Itoa(s.Size)+" B")
	}
	if s.Burst {
		parts = append(parts, "--udp-burst")
	}
	if s.Idle {
		parts = append(parts, "idle")
	}
	return strings.Join(parts, ", ")
}

// mismatch says how the run differs from the shape ("" if it does not).
func (s Shape) mismatch(r runShape) string {
	var d []string
	if s.Source != "" && r.source != s.Source {
		d = append(d, r.source+" source")
	}
	if s.Ports > 0 && r.ports != s.Ports {
		d = append(d, trimNumber(float64(r.ports))+" ports")
	}
	if s.Services > 0 && r.services != s.Services {
		d = append(d, trimNumber(float64(r.services))+" services")
	}
	if s.Rate > 0 && r.rate != s.Rate {
		d = append(d, trimNumber(r.rate)+" changes/s")
	}
	if s.Rate > 0 && r.rate == s.Rate && r.made < madeShare*s.Rate {
		d = append(d, "only "+trimNumber(r.made)+" changes/s made")
	}
	if s.Size > 0 && r.size != s.Size {
		d = append(d, strconv.Itoa(r.size)+" B")
	}
	if s.Burst && r.burst <= 1 {
		d = append(d, "no --udp-burst")
	}
	if s.Burst && r.gso {
		d = append(d, "--udp-gso")
	}
	if s.Idle && !r.idle {
		d = append(d, "no --idle-wait")
	}
	return strings.Join(d, ", ")
}

// judge is the goal's verdict on figure f of a run of shape r.
func (g Goal) judge(r runShape, f Figure) GoalResult {
	out := GoalResult{ID: g.ID, Name: g.Name, Goal: g.String(), Command: g.Command}
	if why := g.Shape.mismatch(r); why != "" {
		out.Verdict, out.Why = "n/a", "this run has "+why
		return out
	}
	v, ok := f.Values[TargetKproxy]
	if !ok {
		out.Verdict, out.Why = "n/a", "kproxy not measured"
		return out
	}
	if g.Peer != "" {
		p, ok := f.Values[g.Peer]
		if !ok || p == 0 {
			out.Verdict, out.Why = "n/a", "no "+g.Peer+" in this run (--compare "+g.Peer+")"
			return out
		}
		v /= p
	}
	out.Judged = true
	out.Met = v <= g.Bound
	if g.AtLeast {
		out.Met = v >= g.Bound
	}
	out.Verdict = "not met"
	if out.Met {
		out.Verdict = "met"
	}
	return out
}

// judgeGoals puts each goal of the scenario on the figures it applies to,
// and lists them all in the result, those without a figure in this run
// too (with the command whose run has one).
func judgeGoals(o *Options, res *ScenarioResult) {
	r := shapeOf(o, res)
	for _, g := range Goals {
		if g.Scenario != res.Name {
			continue
		}
		var verdicts []GoalResult
		for i := range res.Figures {
			f := &res.Figures[i]
			if g.Figure.MatchString(f.Name) {
				v := g.judge(r, *f)
				f.Goals = append(f.Goals, v)
				verdicts = append(verdicts, v)
			}
		}
		// One figure a goal: a verdict of its shape if any, else the first.
		v := GoalResult{ID: g.ID, Name: g.Name, Goal: g.String(), Command: g.Command, Verdict: "not in this run"}
		if i := slices.IndexFunc(verdicts, func(v GoalResult) bool { return v.Judged }); i >= 0 {
			v = verdicts[i]
		} else if len(verdicts) > 0 {
			v = verdicts[0]
		}
		res.Goals = append(res.Goals, v)
	}
}

// trimNumber is v with thousands separated and no trailing zeros:
// 10,000; 1.1; 0.5.
func trimNumber(v float64) string {
	if v >= 1000 || v == float64(int64(v)) {
		return formatNumber(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
