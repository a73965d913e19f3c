//go:build linux

package datapath

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// The child half of TestTCPProxySurvivesFDExhaustion: a proxy in a process
// allowed only a few file descriptors (its backend runs in the parent).
func TestHelperFDLimitedProxy(t *testing.T) {
	backend := os.Getenv("KPROXY_FDLIMIT_BACKEND")
	if backend == "" {
		t.Skip("helper process for TestTCPProxySurvivesFDExhaustion")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{Cur: 64, Max: 64}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return backend, nil })}
	go p.Serve(ln.(*net.TCPListener), nil)
	fmt.Printf("ADDR %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin) // serve until the parent closes stdin
	// Done: not on to TestMain's second pass, whose switch to the event
	// loops would race with this proxy's goroutines.
	os.Exit(0)
}

// fd exhaustion in the proxy: connections already proxied keep working,
// new ones fail or wait without breaking the listener, and once fds free
// up the proxy serves again.
func TestTCPProxySurvivesFDExhaustion(t *testing.T) {
	backend, err := backends.StartTCP("backend", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(backend.Close)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFDLimitedProxy$", "-test.v")
	cmd.Env = append(os.Environ(), "KPROXY_FDLIMIT_BACKEND="+backend.Addr())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("helper process did not start")
	}
	go io.Copy(io.Discard, stdout)

	type held struct {
		c net.Conn
		r *bufio.Reader
	}
	var served []held
	var pending []net.Conn
	starvedByReset := 0
	defer func() {
		for _, h := range served {
			h.c.Close()
		}
		for _, c := range pending {
			c.Close()
		}
	}()
	// Far more connections than 64 fds allow (each proxied connection costs
	// the proxy two: the client's and the backend dial).
	for range 60 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if errors.Is(err, syscall.ECONNRESET) {
			starvedByReset++ // accepted, no fd to dial the backend: reset before connect returned
			continue
		}
		if err != nil {
			t.Fatalf("dial: %v", err) // the kernel completes handshakes into the backlog
		}
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		r := bufio.NewReader(c)
		if name, err := backends.ReadName(r); err == nil && name == "backend" {
			served = append(served, held{c, r})
		} else {
			pending = append(pending, c)
		}
	}
	if len(served) == 0 || len(pending)+starvedByReset == 0 {
		t.Fatalf("want some connections served and some starved by the fd limit; served %d, starved %d", len(served), len(pending))
	}
	// Connections proxied before exhaustion keep working.
	for i, h := range served {
		h.c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(h.c, "ping %d\n", i)
		if line, err := h.r.ReadString('\n'); err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("served connection %d broke under fd exhaustion: %q %v", i, line, err)
		}
	}
	nServed, nPending := len(served), len(pending)+starvedByReset
	// Free the fds: the listener was kept, so the proxy serves again.
	for _, h := range served {
		h.c.Close()
	}
	for _, c := range pending {
		c.Close()
	}
	served, pending = nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			name, rerr := backends.ReadName(bufio.NewReader(c))
			c.Close()
			if rerr == nil && name == "backend" {
				break
			}
			err = rerr
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy did not recover after fds were freed (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond) // retry pacing; the child gives no event for "fds available"
	}
	t.Logf("under a 64-fd limit: %d connections proxied and kept working, %d starved until fds were freed, then served again", nServed, nPending)
}
