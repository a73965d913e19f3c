package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every command's --help exits 0, and `kproxy version` and
// `kproxy --version` agree.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"run", "--help"}, {"watch", "--help"}, {"cleanup", "--help"},
		{"chaos", "--help"}, {"chaos", "storm", "--help"}, {"chaos", "state", "--help"},
		{"chaos", "crash", "--help"}, {"chaos", "endpoint", "-h"}, {"chaos", "rules", "--help"},
		{"bench", "--help"}, {"bench", "ports", "--help"},
	} {
		if code := kproxyMain(args, &bytes.Buffer{}); code != 0 {
			t.Errorf("kproxy %s: exit %d, want 0", strings.Join(args, " "), code)
		}
	}
	var v1, v2 bytes.Buffer
	if kproxyMain([]string{"version"}, &v1) != 0 || kproxyMain([]string{"--version"}, &v2) != 0 || v1.String() != v2.String() || !strings.HasPrefix(v1.String(), "kproxy ") {
		t.Errorf("kproxy version %q and --version %q differ", v1.String(), v2.String())
	}
	if code := kproxyMain([]string{"frobnicate"}, &bytes.Buffer{}); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
}
