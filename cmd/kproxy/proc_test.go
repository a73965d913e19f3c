package main

import (
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is this test binary run as kproxy in a process of its own (the
// core and node proxies of the remote tests: protoactor remoting sets
// gRPC's global logger when it starts, so one remoting per process).
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), asKproxyEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.logs.String())
		}
	})
	return p
}

// waitLog waits until the output holds substr at least n times.
func (p *proc) waitLog(t *testing.T, substr string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		text, grew := p.logs.next()
		if strings.Count(text, substr) >= n {
			return
		}
		select {
		case <-grew:
		case <-p.done:
			if strings.Count(p.logs.String(), substr) >= n {
				return
			}
			t.Fatalf("%s exited (%v) before logging %q %d times", p.name, p.err, substr, n)
		case <-deadline.C:
			t.Fatalf("%s: %q not logged %d times within %v", p.name, substr, n, timeout)
		}
	}
}

// wait waits for the process to exit by itself.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", p.name, timeout)
		return nil
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// freeTCPPort is a loopback TCP port free at the time of the call, below
// the kernel's ephemeral range (32768 and up), so no outgoing connection
// takes it before the process that is given it binds it.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		port := 20000 + mathrand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// namesThrough connects n times to addr and counts the backends that answer.
func namesThrough(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		seen[readName(t, addr)]++
	}
	return seen
}

// coreArgs starts a core on a manifest file.
func coreArgs(addr, manifest string, extra ...string) []string {
	return append([]string{"watch", "--serve", addr, "--source", "file:" + manifest, "--file-poll-interval", "20ms",
		"--min-sync-period", "10ms", "--log-level", "debug", "--log-format", "json"}, extra...)
}

// testNodePort is the node port of the remote tests' services: each node
// proxy (bind portal) listens on it on an address of its own, so a test
// reaches each node's view apart (they share the service's cluster IP).
const testNodePort = 30080

// nodeIP is the loopback address of the node proxy numbered id (any
// number below 65536 a test holds, such as a free port).
func nodeIP(id int) string { return fmt.Sprintf("127.1.%d.%d", id>>8, id&0xff) }

// nodeAddr is where the node proxy numbered id serves the node port.
func nodeAddr(id int) string { return fmt.Sprintf("%s:%d", nodeIP(id), testNodePort) }

// nodeArgs starts a node proxy (bind portal on loopback) whose node ports
// listen on nodeIP(id).
func nodeArgs(core, node string, id int, extra ...string) []string {
	return append([]string{"run", "--source", "remote:" + core, "--node-name", node, "--portal", "bind",
		"--bind-address", nodeIP(id),
		"--healthz-bind-address", "", "--metrics-bind-address", "", "--proxy-ports-file", "",
		"--min-sync-period", "10ms", "--log-level", "debug", "--log-format", "json", "--shutdown-grace-period", "1s"}, extra...)
}

// awaitNames probes addr with connections until the backends answering
// within a round of n are exactly want (or the deadline passes): the
// node proxy announces no per-change event a test can await from
// outside, so the probe is the event.
func awaitNames(t *testing.T, addr string, n int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last map[string]int
	for time.Now().Before(deadline) {
		seen := map[string]int{}
		failed := false
		for range n {
			name, err := tryReadName(addr)
			if err != nil {
				failed = true
				break
			}
			seen[name]++
		}
		if !failed && len(seen) == len(want) {
			ok := true
			for _, w := range want {
				ok = ok && seen[w] > 0
			}
			if ok {
				return
			}
		}
		last = seen
		time.Sleep(20 * time.Millisecond) // probe pacing
	}
	t.Fatalf("%s: answered by %v, want exactly %v", addr, last, want)
}
