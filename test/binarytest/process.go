package binarytest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Proc is one started process with its output in a log file.
type Proc struct {
	Cmd  *exec.Cmd
	Log  string // the path of its stdout and stderr
	done chan struct{}
	err  error // of Wait, once done is closed
}

// Start starts cmd with its output in logPath; cleanup kills it if it is
// still running and, when the test failed, shows the end of its log.
func Start(t *testing.T, cmd *exec.Cmd, logPath string) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Log: logPath, done: make(chan struct{})}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", p.Cmd, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("kproxy pid %d did not exit after SIGKILL", p.Cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("end of %s:\n%s", p.Log, Tail(p.Log, 40))
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is Wait's error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Tail is the last lines of the file at path, or why it cannot be read.
func Tail(path string, lines int) string {
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
