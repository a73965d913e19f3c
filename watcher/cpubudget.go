package watcher

import "time"

// maxBudgetWait bounds how long a flush waits for its budget (kube-proxy's
// default minSyncPeriod in iptables mode).
const maxBudgetWait = time.Second

// CPUBudget spaces flushes by what they cost: after one starts, the next
// waits until the process has used at most Share of one CPU since, and
// never longer than a second. A lone change goes at once; under sustained
// churn changes coalesce into fewer, larger flushes the more each costs
// (a core's grows with its nodes), so a change costs about the same
// whatever the number of nodes, and the process leaves the rest of the
// machine alone. Without a process CPU clock (processCPU is 0) nothing
// waits.
type CPUBudget struct {
	// Share is the share of one CPU flushes may use under sustained
	// churn (building, sending and what comes back).
	Share float64
	at    time.Time
	cpu   time.Duration
	// clock is the process's CPU time (processCPU; tests set their own).
	clock func() time.Duration
}

func (b *CPUBudget) now() time.Duration {
	if b.clock != nil {
		return b.clock()
	}
	return processCPU()
}

// Wait is how long a flush asked for at now waits.
func (b *CPUBudget) Wait(now time.Time) time.Duration {
	if b.at.IsZero() || b.Share <= 0 {
		return 0
	}
	used := b.now() - b.cpu
	return min(b.at.Add(time.Duration(float64(used)/b.Share)).Sub(now), maxBudgetWait)
}

// Started notes a flush starting at now.
func (b *CPUBudget) Started(now time.Time) { b.at, b.cpu = now, b.now() }
