//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one kproxy run in the node namespace.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // of Wait, once done is closed
}

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
	cmd := e.tp.Node.Command(context.Background(), e.bin, args...)
	if len(e.wrap) > 0 {
		cmd = e.tp.Node.Command(context.Background(), e.wrap[0], append(append(e.wrap[1:len(e.wrap):len(e.wrap)], e.bin), args...)...)
	}
	if e.path != "" {
		cmd.Env = append(os.Environ(), "PATH="+e.path)
	}
	p := startProc(t, cmd, filepath.Join(e.dir, fmt.Sprintf("kproxy-%d.log", e.procs)))
	t.Logf("started kproxy (pid %d): %s", p.cmd.Process.Pid, strings.Join(args, " "))
	return p
}

// startProc starts cmd with its output in logPath; cleanup kills it if it
// is still running and, when the test failed, shows the end of its log.
func startProc(t *testing.T, cmd *exec.Cmd, logPath string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", p.cmd, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("kproxy pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("end of %s:\n%s", p.log, tail(p.log, 40))
		}
	})
	return p
}

// stop sends sig and waits (at most 15 s) for kproxy to exit; it returns
// the exit code (-1 when killed by a signal).
func (p *proc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to kproxy: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("kproxy did not exit within 15s of %v", sig)
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		t.Fatalf("kproxy: %v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
