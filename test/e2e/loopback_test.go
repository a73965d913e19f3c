//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// loopbackKproxy runs the binary on loopback (bind portal) serving
// manifest, without health and metrics servers, until the test ends; its
// log is shown when the test fails. It returns the process id.
func loopbackKproxy(t *testing.T, bin, manifest string, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--portal", "bind", "--bind-address", "127.0.0.1",
		"--source", "file:" + manifest, "--healthz-bind-address", "", "--metrics-bind-address", "", "--log-level", "warn",
		"--proxy-ports-file", "", "--shutdown-grace-period", "1s"}, args...)...)
	var logs strings.Builder
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("kproxy log (end):\n%s", tailString(logs.String(), 3000))
			mu.Unlock()
		}
	})
	return cmd.Process.Pid
}

// checker runs checks every 50 ms until stopped, counting failures.
type checker struct {
	checks, failures atomic.Int64
	first            atomic.Value
	stop             chan struct{}
	wg               sync.WaitGroup
}

func startChecks(checks ...func() error) *checker {
	c := &checker{stop: make(chan struct{})}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, check := range checks {
				c.checks.Add(1)
				if err := check(); err != nil {
					c.failures.Add(1)
					c.first.CompareAndSwap(nil, err)
				}
			}
		}
	}()
	return c
}

// Stop ends the checks and returns how many ran and failed, and the first error.
func (c *checker) Stop() (checks, failures int64, first any) {
	close(c.stop)
	c.wg.Wait()
	return c.checks.Load(), c.failures.Load(), c.first.Load()
}

// procStats reads a process's open fds and resident memory.
func procStats(pid int) (fds int, rssKiB int64) {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return len(entries), 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return len(entries), rssKiB
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// tcpOK makes one request through a TCP service (the backend says its name).
func tcpOK(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	_, err = backends.ReadName(bufio.NewReader(c))
	return err
}

// udpOK makes one exchange through a UDP service from a fresh socket.
func udpOK(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 256))
	return err
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
