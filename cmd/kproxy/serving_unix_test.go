//go:build unix

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A serving process's mark is seen by the others while it holds its lock;
// its own is not its successor; a mark whose process died (no lock held)
// is removed, with its socket file; a cleared mark is gone.
func TestServingMarks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "serving")
	m, err := markServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "0123456789abcdef") // a killed process's: nobody locks it
	for _, f := range []string{dead, dead + ".sock"} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := liveServing(dir, nil); !slices.Equal(got, []string{m.path}) {
		t.Fatalf("live marks %v, want only %s", got, m.path)
	}
	if !sameNetNamespace(m.path) {
		t.Error("a mark of this network namespace is taken for another's")
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("1\nnet:[1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sameNetNamespace(other) {
		t.Error("a mark of another network namespace is taken for this one's")
	}
	for _, f := range []string{dead, dead + ".sock"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s of a dead process was not removed", f)
		}
	}
	if got := liveServing(dir, m); len(got) != 0 {
		t.Fatalf("a process sees %v as its successor, want none but itself", got)
	}
	m.clear()
	if got := liveServing(dir, nil); len(got) != 0 {
		t.Fatalf("a cleared mark is still live: %v", got)
	}
}
