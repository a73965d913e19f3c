package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// The start's collector target holds until restored, then the previous
// one is back; an operator's GOGC is left alone.
func TestRelaxGCForStart(t *testing.T) {
	t.Setenv("GOGC", "") // t.Setenv first, so the unset below is undone too
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Run("GOGC set", func(t *testing.T) {
		restore := relaxGCForStart()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("with GOGC set the target became %d, want it left at 100", got)
		}
		restore()
	})
	t.Run("GOGC unset", func(t *testing.T) {
		os.Unsetenv("GOGC") // the t.Setenv above restores it
		restore := relaxGCForStart()
		if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
			t.Errorf("during the start the target is %d, want %d", got, startGCPercent)
		}
		restore()
		restore() // a second call (the deferred one after the first state) changes nothing
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("after the start the target is %d, want 100 back", got)
		}
	})
}
