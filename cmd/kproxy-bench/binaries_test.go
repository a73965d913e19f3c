package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/bench/harness"
)

// Without --kproxy the harness runs the kproxy beside its own binary, and
// says how to get one when there is none.
func TestKproxyBeside(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "kproxy-bench")
	if _, err := kproxyBeside(self); err == nil || !strings.Contains(err.Error(), "--kproxy") {
		t.Fatalf("no kproxy beside: %v, want an error naming --kproxy", err)
	}
	want := filepath.Join(dir, "kproxy")
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := kproxyBeside(self); err != nil || got != want {
		t.Fatalf("kproxyBeside: %q, %v; want %q", got, err, want)
	}
}

// A baseline that cannot run fails the command line before any scenario
// starts a process, naming the flag.
func TestBaselineFlagErrors(t *testing.T) {
	dir := t.TempDir()
	kproxy := filepath.Join(dir, "kproxy")
	if err := os.WriteFile(kproxy, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    harness.Options
		want string
	}{
		{"compare without a binary", harness.Options{Kproxy: kproxy, Compare: []string{harness.TargetBaseline}}, "--baseline-kproxy"},
		{"missing", harness.Options{Kproxy: kproxy, Baseline: filepath.Join(dir, "nope"), Compare: []string{harness.TargetBaseline}}, "--baseline-kproxy " + filepath.Join(dir, "nope")},
		{"a directory", harness.Options{Kproxy: kproxy, Baseline: dir, Compare: []string{harness.TargetBaseline}}, "not an executable file"},
		{"not executable", harness.Options{Kproxy: kproxy, Baseline: notExec, Compare: []string{harness.TargetBaseline}}, "not an executable file"},
		{"kproxy missing", harness.Options{Kproxy: filepath.Join(dir, "nope")}, "--kproxy"},
	} {
		err := benchBinaries(&tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Through the command: exit 1 and no report.
	var out bytes.Buffer
	if code := benchMain([]string{"ports", "--kproxy", kproxy, "--baseline-kproxy", filepath.Join(dir, "nope"), "--quiet"}, &out); code != 1 || out.Len() != 0 {
		t.Errorf("exit %d, output %q; want 1 and none", code, out.String())
	}
}

// Every scenario's --help exits 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"ports", "--help"}, {"-h"}} {
		if code := benchMain(args, &bytes.Buffer{}); code != 0 {
			t.Errorf("kproxy-bench %s: exit %d, want 0", strings.Join(args, " "), code)
		}
	}
	var v bytes.Buffer
	if benchMain([]string{"version"}, &v) != 0 || !strings.HasPrefix(v.String(), "kproxy-bench ") {
		t.Errorf("kproxy-bench version: %q", v.String())
	}
}
