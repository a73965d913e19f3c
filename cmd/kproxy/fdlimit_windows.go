package main

import "github.com/rs/zerolog"

// fdLimit: Windows has no per-process handle limit worth deriving bounds
// from; this sizes the default limits for a large node.
func fdLimit() int64 { return 1 << 20 }

// raiseFDLimit: nothing to raise on Windows.
func raiseFDLimit(zerolog.Logger) int64 { return fdLimit() }
