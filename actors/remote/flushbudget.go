package remote

import "time"

// coreFlushShare is the share of one CPU a core's flushes may use under
// sustained churn: building, encoding and sending them, and the
// acknowledgements coming back.
const coreFlushShare = 0.5

// maxFlushWait bounds how long a change waits for the budget (kube-proxy's
// default minSyncPeriod in iptables mode).
const maxFlushWait = time.Second

// flushBudget spaces a core's flushes by what they cost: after one starts,
// the next waits until the process has used at most coreFlushShare of the
// time since. A lone change goes at once; under sustained churn changes
// coalesce into fewer, larger deltas the more nodes there are, so a change
// costs about the same whatever the number of nodes, and the core leaves
// the rest of the machine alone. Without a process CPU clock (processCPU
// is 0) nothing waits.
type flushBudget struct {
	at  time.Time
	cpu time.Duration
	// clock is the process's CPU time (processCPU; tests set their own).
	clock func() time.Duration
}

func (b *flushBudget) now() time.Duration {
	if b.clock != nil {
		return b.clock()
	}
	return processCPU()
}

// wait is how long a flush asked for at now waits.
func (b *flushBudget) wait(now time.Time) time.Duration {
	if b.at.IsZero() {
		return 0
	}
	used := b.now() - b.cpu
	return min(b.at.Add(time.Duration(float64(used)/coreFlushShare)).Sub(now), maxFlushWait)
}

// started notes a flush starting at now.
func (b *flushBudget) started(now time.Time) { b.at, b.cpu = now, b.now() }
