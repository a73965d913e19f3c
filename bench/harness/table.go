package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints every scenario's figures as one table, with kproxy's
// ratio to direct, to HAProxy (and to the UDP relay and the baseline
// kproxy when they were measured) where both were measured in the run,
// and the goal a figure is judged by with this run's verdict; then every
// goal of the scenarios run, with the command that judges it.
func (r *Report) WriteTable(w io.Writer) error {
	peers := r.peers()
	goals := r.hasGoals()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"scenario", "figure", "unit"}
	head = append(head, peers...)
	head = append(head, TargetKproxy)
	for _, p := range peers {
		head = append(head, "kproxy/"+p)
	}
	if goals {
		head = append(head, "goal")
	}
	fmt.Fprintln(tw, row(head))
	for _, s := range r.Scenarios {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\tFAILED: %s\t%s\n", s.Name, firstLine(s.Error), strings.Repeat("\t", len(head)-2))
		}
		if s.Skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped: %s\t%s\n", s.Name, s.Skipped, strings.Repeat("\t", len(head)-2))
		}
		for _, f := range s.Figures {
			cells := []string{s.Name, f.Name, f.Unit}
			for _, p := range peers {
				cells = append(cells, cellValue(f, p))
			}
			cells = append(cells, cellValue(f, TargetKproxy))
			for _, p := range peers {
				cells = append(cells, ratioValue(f, p))
			}
			if goals {
				cells = append(cells, goalCell(f))
			}
			fmt.Fprintln(tw, row(cells))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeGoals(w)
}

// row is a table line: cells in columns, the last one not padded (the
// goal column's text is long).
func row(cells []string) string {
	return strings.Join(cells, "\t")
}

// hasGoals says whether some figure is judged by a goal.
func (r *Report) hasGoals() bool {
	for _, s := range r.Scenarios {
		for _, f := range s.Figures {
			if len(f.Goals) > 0 {
				return true
			}
		}
	}
	return false
}

// goalCell is a figure's goals and their verdicts: "≥ 1.1× haproxy at
// 64 B: met"; "—" for none.
func goalCell(f Figure) string {
	if len(f.Goals) == 0 {
		return "—"
	}
	var cells []string
	for _, g := range f.Goals {
		cells = append(cells, g.Goal+": "+g.Verdict)
	}
	return strings.Join(cells, "; ")
}

// writeGoals lists every goal of the scenarios run: its verdict here (or
// that this run has no figure for it) and the command that judges it.
func (r *Report) writeGoals(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	first := true
	for _, s := range r.Scenarios {
		for _, g := range s.Goals {
			if first {
				fmt.Fprintln(tw, "\ngoals of these scenarios, and the run that judges each:")
				fmt.Fprintln(tw, row([]string{"scenario", "goal", "target", "this run", "judged by"}))
				first = false
			}
			verdict := g.Verdict
			if g.Why != "" {
				verdict += ": " + g.Why
			}
			fmt.Fprintln(tw, row([]string{s.Name, g.Name, g.Goal, verdict, g.Command}))
		}
	}
	return tw.Flush()
}

// peers are what kproxy is compared with in the table: direct and
// HAProxy always, the kernel, the tuned and the minimal HAProxy, nginx, the relay and the
// baseline kproxy when some figure has them.
func (r *Report) peers() []string {
	peers := []string{TargetDirect, TargetHAProxy}
	for _, t := range []string{TargetKernel, TargetHAProxyTuned, TargetHAProxyMinimal, TargetNginx, TargetRelay, TargetBaseline} {
		if r.measured(t) {
			peers = append(peers, t)
		}
	}
	return peers
}

// measured says whether some figure has a value for target t.
func (r *Report) measured(t string) bool {
	for _, s := range r.Scenarios {
		for _, f := range s.Figures {
			if _, ok := f.Values[t]; ok {
				return true
			}
		}
	}
	return false
}

// cellValue is a target's value, or a dash when it was not measured.
func cellValue(f Figure, t string) string {
	v, ok := f.Values[t]
	if !ok {
		return "—"
	}
	return formatNumber(v)
}

// ratioValue is kproxy's value over t's.
func ratioValue(f Figure, t string) string {
	k, ok1 := f.Values[TargetKproxy]
	v, ok2 := f.Values[t]
	if !ok1 || !ok2 || v == 0 {
		return "—"
	}
	return strconv.FormatFloat(k/v, 'f', 2, 64)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// formatNumber prints about three significant digits, with thousands
// separated: 98,755; 139.5; 0.327.
func formatNumber(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "0"
	case a >= 1000:
		s := strconv.FormatFloat(v, 'f', 0, 64)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case a >= 100 || v == float64(int64(v)): // counts print as integers
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}
