package harness

import (
	"context"
	"fmt"
	"time"
)

// target is what a load is aimed at: kproxy's or HAProxy's service
// addresses (with the process whose CPU it costs), or the backends directly.
type target struct {
	name  string
	addrs []string
	proc  *Proc // nil for direct
}

// loadRound runs one load against t and measures the proxy's CPU over it.
func (e *env) loadRound(ctx context.Context, t target, spec loadSpec, label string) (*loadResult, Round, error) {
	spec.Addrs, spec.Live = t.addrs, e.live
	e.live.target.Store(t.name)
	defer e.live.target.Store("")
	e.progress.step(label, spec.Duration)
	var before ProcStat
	var statErr error
	if t.proc != nil {
		before, statErr = t.proc.Stat()
	}
	machineBefore, machineErr := readMachineCPU()
	res, err := runLoad(ctx, spec)
	if err != nil {
		return nil, Round{}, err
	}
	r := Round{Mode: spec.Mode, Target: t.name, Ops: res.Ops, Errors: res.Errors, Seconds: res.Elapsed.Seconds(),
		OpsPerSecond: float64(res.Ops) / res.Elapsed.Seconds(), ErrSamples: res.ErrSamples}
	if after, err := readMachineCPU(); err == nil && machineErr == nil && res.Ops > 0 {
		r.MachineCPUMicrosPerOp = (after - machineBefore).Seconds() * 1e6 / float64(res.Ops)
	}
	if t.proc != nil {
		select {
		case <-t.proc.Done():
			return res, r, t.proc.exitError()
		default:
		}
		if after, err := t.proc.Stat(); err == nil && statErr == nil {
			r.CPUSeconds = (after.CPU - before.CPU).Seconds()
			if res.Ops > 0 {
				r.CPUMicrosPerOp = r.CPUSeconds * 1e6 / float64(res.Ops)
			}
		}
	}
	return res, r, nil
}

// awaitReady waits until every address of t forwards, reporting progress.
func (e *env) awaitReady(ctx context.Context, t target, mode string, start time.Time) (*readiness, error) {
	return e.awaitReadyGated(ctx, t, mode, start, nil)
}

// awaitReadyGated is awaitReady taking addresses in the order given (see
// awaitForwarding).
func (e *env) awaitReadyGated(ctx context.Context, t target, mode string, start time.Time, order <-chan int) (*readiness, error) {
	e.progress.step(fmt.Sprintf("%s: %d ports coming up", t.name, len(t.addrs)), 0)
	r, err := awaitForwarding(ctx, t.proc, t.addrs, mode, start, e.o.ReadyTimeout, order)
	if err != nil {
		return r, fmt.Errorf("%s: %w", t.name, err)
	}
	return r, nil
}

// figure makes a table row.
func figure(name, unit string, lowerIsBetter bool, values map[string]float64) Figure {
	return Figure{Name: name, Unit: unit, Values: values, LowerIsBetter: lowerIsBetter}
}

// procFigures are a process's size now: RSS (and its anonymous part),
// fds, threads and (kproxy) goroutines.
func procFigures(p *Proc) (ProcPoint, error) {
	st, err := p.Stat()
	if err != nil {
		return ProcPoint{}, err
	}
	pt := ProcPoint{CPUSeconds: st.CPU.Seconds(), RSS: st.RSS, FDs: st.FDs, Threads: st.Threads}
	pt.AnonRSS, _ = readAnonRSS(p.Pid()) // 0, not reported, where unreadable
	if p.Metrics != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pt.Goroutines, pt.Restarts, _ = p.scrape(ctx, httpClient)
	}
	return pt, nil
}
