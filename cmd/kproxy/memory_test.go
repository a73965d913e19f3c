package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"
)

// The start's GC target holds until the first state is applied, then the
// default is back; a GOGC the user set is left alone.
func TestStartGCPercent(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment")
	}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	restore := loosenGCForStart()
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Fatalf("GC percent while starting: %d, want %d", got, startGCPercent)
	}
	done := make(chan struct{})
	releaseAfterStart(1, func() { restore(); close(done) }, zerolog.Nop())
	<-done
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent once the first state is applied: %d, want 100", got)
	}
	restore() // again: changes nothing
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent after a second restore: %d, want 100", got)
	}

	t.Setenv("GOGC", "300")
	debug.SetGCPercent(300)
	loosenGCForStart()
	if got := debug.SetGCPercent(300); got != 300 {
		t.Fatalf("GC percent with GOGC=300 set: %d, want 300", got)
	}
}
