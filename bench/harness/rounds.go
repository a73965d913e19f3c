package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// rounds is what one load's interleaved rounds gathered, per target name.
type rounds struct {
	hists       map[string]*hdrhistogram.Histogram
	rates, cpus map[string][]float64 // one per round; CPU only where a process was read
	machine     map[string][]float64 // the machine's CPU per operation, one per round
	failed      map[string]float64
}

// interleave runs a warm-up of spec against each target, then
// o.Rounds rounds of it for o.Duration, the targets' order rotating each
// round so drift on the machine hits each alike. label names the steps
// ("conn", "client-address conn"); every round goes into res and to
// logRound.
func (e *env) interleave(ctx context.Context, res *ScenarioResult, label string, spec loadSpec, targets []target, logRound func(t target, r int, round Round)) (rounds, error) {
	o := e.o
	warm := spec
	warm.Duration = min(o.Duration/2, time.Second)
	for _, t := range targets {
		if _, _, err := e.loadRound(ctx, t, warm, fmt.Sprintf("%s %s: warm-up", label, t.name)); err != nil {
			return rounds{}, err
		}
	}
	spec.Duration = o.Duration
	g := rounds{hists: map[string]*hdrhistogram.Histogram{}, rates: map[string][]float64{}, cpus: map[string][]float64{},
		machine: map[string][]float64{}, failed: map[string]float64{}}
	for r := range o.Rounds {
		for j := range targets {
			t := targets[(r+j)%len(targets)]
			lr, round, err := e.loadRound(ctx, t, spec, fmt.Sprintf("%s %s: round %d/%d", label, t.name, r+1, o.Rounds))
			if err != nil {
				return rounds{}, err
			}
			round.Round = r + 1
			res.Rounds = append(res.Rounds, round)
			if g.hists[t.name] == nil {
				g.hists[t.name] = newHist()
			}
			g.hists[t.name].Merge(lr.Hist)
			g.rates[t.name] = append(g.rates[t.name], round.OpsPerSecond)
			if t.proc != nil && round.CPUMicrosPerOp > 0 {
				g.cpus[t.name] = append(g.cpus[t.name], round.CPUMicrosPerOp)
			}
			if round.MachineCPUMicrosPerOp > 0 {
				g.machine[t.name] = append(g.machine[t.name], round.MachineCPUMicrosPerOp)
			}
			g.failed[t.name] += float64(round.Errors)
			logRound(t, r, round)
		}
	}
	return g, nil
}
