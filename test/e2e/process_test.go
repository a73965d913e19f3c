//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// proc is one kproxy run in the node namespace.
type proc struct{ *binarytest.Proc }

// start runs kproxy run in the node namespace; cleanup kills it if it is
// still running and, when the test failed, shows the end of its log.
func (e *env) start(t *testing.T, extra ...string) *proc {
	t.Helper()
	e.procs++
	// A token file per process: parallel tests' kproxies share the
	// host's file system, and each its admin address.
	e.tokenFile = filepath.Join(e.dir, fmt.Sprintf("admin-token-%d", e.procs))
	args := append([]string{"run", "--portal", e.mode, "--source", "file:" + e.manifest, "--node-name", "node",
		"--log-format", "json", "--enable-fault-injection", "--admin-address", e.adminAddr(), "--admin-token-file", e.tokenFile,
		"--file-poll-interval", "100ms", "--proxy-ports-file", filepath.Join(e.dir, "proxy-ports.json"),
		"--shutdown-grace-period", "2s"}, extra...)
	if e.noFaults {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--enable-fault-injection" })
	}
	cmd := e.tp.Node.Command(context.Background(), e.bin, args...)
	if len(e.wrap) > 0 {
		cmd = e.tp.Node.Command(context.Background(), e.wrap[0], append(append(e.wrap[1:len(e.wrap):len(e.wrap)], e.bin), args...)...)
	}
	if e.path != "" {
		cmd.Env = append(os.Environ(), "PATH="+e.path)
	}
	p := startProc(t, cmd, filepath.Join(e.dir, fmt.Sprintf("kproxy-%d.log", e.procs)))
	t.Logf("started kproxy (pid %d): %s", p.Cmd.Process.Pid, strings.Join(args, " "))
	return p
}

// startProc is binarytest.Start, as a proc.
func startProc(t *testing.T, cmd *exec.Cmd, logPath string) *proc {
	t.Helper()
	return &proc{binarytest.Start(t, cmd, logPath)}
}

// stop sends sig and waits (at most 15 s) for kproxy to exit; it returns
// the exit code (-1 when killed by a signal).
func (p *proc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to kproxy: %v", sig, err)
	}
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("kproxy did not exit within 15s of %v", sig)
	}
	var exit *exec.ExitError
	if p.Err() != nil && !errors.As(p.Err(), &exit) {
		t.Fatalf("kproxy: %v", p.Err())
	}
	return p.Cmd.ProcessState.ExitCode()
}
