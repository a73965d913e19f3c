//go:build !unix

package watcher

import "time"

// processCPU is unknown here: flushes are not paced by their cost.
func processCPU() time.Duration { return 0 }
