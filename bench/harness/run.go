package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// env is what a scenario runs with.
type env struct {
	o        *Options
	dir      string // this scenario's files
	backends *Backends
	live     *live
	progress *progress
}

// logf prints a step's line: above the progress bar when there is one.
func (e *env) logf(format string, args ...any) {
	switch {
	case e.progress != nil && e.o.Log == e.o.Progress:
		e.progress.println(fmt.Sprintf(format, args...))
	case e.o.Log != nil:
		fmt.Fprintf(e.o.Log, format+"\n", args...)
	}
}

// scenarioFuncs run one scenario each.
var scenarioFuncs = map[string]func(context.Context, *env, *ScenarioResult) error{
	"startup": runStartup,
	"ports":   runPorts,
	"churn":   runChurn,
	"chaos":   runChaos,

	ScenarioClientAddress: runClientAddress,
}

// baselineScenarios are the scenarios that run the baseline kproxy beside
// the current one; churn and chaos measure the current one alone.
var baselineScenarios = []string{"startup", "ports"}

// Run runs the scenarios in order. A scenario that fails is reported in
// its result (Error) and the next one runs; the error returned is the
// first scenario's failure.
func Run(ctx context.Context, o Options, scenarios []string) (*Report, error) {
	o.Defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	for _, s := range scenarios {
		if scenarioFuncs[s] == nil {
			return nil, fmt.Errorf("scenario %q: want one of %s, or all", s, strings.Join(Scenarios, ", "))
		}
	}
	rep := &Report{Started: time.Now().UTC(), Host: hostInfo(), Options: o}
	b, err := startBackends(max(o.Endpoints, 2))
	if err != nil {
		return nil, err
	}
	defer b.Close()
	l := &live{}
	prog := newProgress(o.Progress, l)
	defer prog.stop()
	var first error
	for _, name := range scenarios {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		res := &ScenarioResult{Name: name}
		rep.Scenarios = append(rep.Scenarios, res)
		e := &env{o: &o, dir: filepath.Join(o.WorkDir, name), backends: b, live: l, progress: prog}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return rep, fmt.Errorf("work dir: %w", err)
		}
		e.logf("scenario %s", name)
		if o.compares(TargetBaseline) && !slices.Contains(baselineScenarios, name) {
			res.Notes = append(res.Notes, "the baseline kproxy is measured in "+strings.Join(baselineScenarios, " and ")+" only")
		}
		err := scenarioFuncs[name](ctx, e, res)
		judgeGoals(&o, res)
		if err != nil {
			res.Error = err.Error()
			e.logf("scenario %s failed: %v", name, err)
			if first == nil {
				first = fmt.Errorf("scenario %s: %w", name, err)
			}
		}
	}
	return rep, first
}

func hostInfo() Host {
	h := Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(raw))
	}
	h.FDMax = fdLimit()
	return h
}

// WriteJSON is the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	return writeJSON(w, r)
}
