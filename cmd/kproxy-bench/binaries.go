package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kproxy/kproxy/bench/harness"
)

// benchBinaries finds the kproxy under test (next to this binary unless
// named), the baseline kproxy, this binary for the UDP relay, and the
// peers' programs (HAProxy, nginx); a peer's program missing drops it
// from the comparison with a note. nginx is also the close mode's server.
func benchBinaries(o *harness.Options) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("this binary's path: %w", err)
	}
	o.Relay = self
	if o.Kproxy == "" {
		if o.Kproxy, err = kproxyBeside(self); err != nil {
			return err
		}
	}
	if err := executable("--kproxy", o.Kproxy); err != nil {
		return err
	}
	if slices.Contains(o.Compare, harness.TargetBaseline) {
		if o.Baseline == "" {
			return errors.New("--compare baseline: name the baseline kproxy binary with --baseline-kproxy")
		}
		if err := executable("--baseline-kproxy", o.Baseline); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		program, packages string
		path              *string
		targets           []string
	}{
		{"haproxy", "haproxy", &o.HAProxy, []string{harness.TargetHAProxy, harness.TargetHAProxyTuned, harness.TargetHAProxyMinimal}},
		{"nginx", "nginx-light libnginx-mod-stream", &o.Nginx, []string{harness.TargetNginx}},
	} {
		wanted := slices.ContainsFunc(o.Compare, func(c string) bool { return slices.Contains(p.targets, c) })
		if !wanted || *p.path != "" {
			continue
		}
		path, err := exec.LookPath(p.program)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kproxy-bench: %s is not installed: its comparison is skipped (Debian: apt-get install %s)\n", p.program, p.packages)
			o.Compare = slices.DeleteFunc(o.Compare, func(c string) bool { return slices.Contains(p.targets, c) })
			continue
		}
		*p.path = path
	}
	// The close mode's HTTP server is nginx where installed; without it the
	// harness runs Go's net/http and says so in the table.
	if slices.Contains(o.Modes, harness.ModeClose) && o.Nginx == "" {
		o.Nginx, _ = exec.LookPath("nginx")
	}
	return nil
}

// kproxyBeside is the kproxy binary in the directory of self (make build
// puts bin/kproxy and bin/kproxy-bench side by side, as go install does).
func kproxyBeside(self string) (string, error) {
	name := "kproxy"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	path := filepath.Join(filepath.Dir(self), name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no kproxy binary beside kproxy-bench (%s): build it (make build) or name one with --kproxy", path)
	}
	return path, nil
}

// executable checks that path is a file that can run, so a wrong flag
// fails here rather than as a scenario whose process never started.
func executable(flagName, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flagName, path, err)
	}
	if st.IsDir() || (runtime.GOOS != "windows" && st.Mode()&0o111 == 0) {
		return fmt.Errorf("%s %s: not an executable file", flagName, path)
	}
	return nil
}

// kproxyVersion is what `BIN version` prints without its name ("dev" for
// a build without -ldflags), or "unknown" when it cannot be asked.
func kproxyVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "kproxy ")
}
