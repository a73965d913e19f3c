package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
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
		{"setup-node", "--help"},
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
	// setup-node takes no arguments: a stray one is an error, not ignored.
	if code := kproxyMain([]string{"setup-node", "net.ipv4.ip_forward=1"}, &bytes.Buffer{}); code != 1 {
		t.Errorf("kproxy setup-node with an argument: exit %d, want 1", code)
	}
}

// `kproxy bench` is gone from the node agent: it fails with a usage exit
// and says which binary runs the benchmarks, with the same arguments.
func TestBenchPointsAtKproxyBench(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "bench", "ports", "--ports", "10")
	cmd.Env = append(os.Environ(), asKproxyEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("kproxy bench ports: %v, want exit status 2\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if want := "run kproxy-bench ports --ports 10"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
}
