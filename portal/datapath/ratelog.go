package datapath

import (
	"sync"
	"time"
)

// rateLogInterval is how often a repeated warning is logged at most.
const rateLogInterval = 10 * time.Second

// RateLog lets a repeated warning through at most once per interval and
// counts the ones it held back, so a flood (fd exhaustion, a limit hit
// thousands of times a second) cannot flood the log. Safe for concurrent
// use; the zero value uses rateLogInterval.
type RateLog struct {
	Interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

// Allow reports whether to log now, and how many were held back since
// the last one logged.
func (r *RateLog) Allow() (bool, int64) {
	interval := r.Interval
	if interval <= 0 {
		interval = rateLogInterval
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < interval {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}
