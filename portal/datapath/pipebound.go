package datapath

import (
	"errors"
	"sync/atomic"
)

// The splice pipes' bound (Limits.MaxPipes, applied by SetMaxPipes; 0
// means none): livePipes counts the pipes open, in use or pooled, and
// pipeMisses the bulk chunks that found no pipe (at the bound, or no fd
// left) and were copied through memory.
var maxPipes, livePipes, pipeMisses atomic.Int64

var errPipeBound = errors.New("splice pipes at their bound")

// SetMaxPipes applies a process's Limits.MaxPipes (splice is Linux's
// alone; elsewhere there are no pipes to bound).
func SetMaxPipes(n int64) { maxPipes.Store(max(n, 0)) }

// PipeCounts returns the splice pipes open, and the chunks that found none.
func PipeCounts() (open, misses int64) { return livePipes.Load(), pipeMisses.Load() }

// takePipe counts a pipe about to be opened; false at the bound.
func takePipe() bool {
	if bound := maxPipes.Load(); livePipes.Add(1) > bound && bound > 0 {
		livePipes.Add(-1)
		return false
	}
	return true
}
