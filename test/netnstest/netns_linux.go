//go:build linux

package netnstest

// Code runs "inside" a namespace on a goroutine locked to an OS thread that
// has setns'd into it: sockets keep the namespace they were created in, and
// a child process (nft, iptables) started from that thread inherits it
// (TestExecInheritsThread).

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var seq atomic.Int32

// Netns is a named network namespace (ip netns), deleted at test cleanup.
type Netns struct {
	Name    string
	deleted atomic.Bool
}

// New creates a namespace kpt-<pid>-<n>-<role> with loopback up and IPv6
// duplicate address detection off, deleted at cleanup. It skips the test
// when not root, without iproute2's ip, or when the kernel or the sandbox
// refuses namespaces.
func New(t testing.TB, role string) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespace tests need iproute2's ip")
	}
	name := fmt.Sprintf("kpt-%d-%d-%s", os.Getpid(), seq.Add(1), role)
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err != nil {
		msg := strings.ToLower(string(out))
		if strings.Contains(msg, "permission denied") || strings.Contains(msg, "operation not permitted") || strings.Contains(msg, "not supported") || strings.Contains(msg, "invalid argument") {
			t.Skipf("kernel refuses network namespaces (ip netns add %s: %s)", name, strings.TrimSpace(string(out)))
		}
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &Netns{Name: name}
	t.Cleanup(func() {
		if n.deleted.Load() {
			return
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	n.MustRun(t, "ip", "link", "set", "lo", "up")
	// No duplicate address detection: addresses are usable at once.
	n.MustRun(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	return n
}

// Delete removes the namespace now, as a host that vanishes: its sockets
// go without a FIN, and its veth pairs with them.
func (n *Netns) Delete(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", n.Name, err, out)
	}
	n.deleted.Store(true)
}

// Path is the namespace's bind mount, for setns.
func (n *Netns) Path() string { return "/var/run/netns/" + n.Name }

func (n *Netns) String() string { return n.Name }

// Command returns a command that runs name inside the namespace (ip netns
// exec, which execs name: the command's process is name's own).
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *Netns) Run(args ...string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("netns %s: no command", n.Name)
	}
	cmd := n.Command(context.Background(), args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s (netns %s): %w: %s", strings.Join(args, " "), n.Name, err, out.String())
	}
	return out.String(), nil
}

// MustRun is Run, failing the test on error.
func (n *Netns) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Do runs fn on a fresh OS thread that has joined the namespace. The
// thread stays locked and is thrown away when fn returns, so the namespace
// never leaks to other goroutines. Goroutines fn starts run elsewhere (in
// the test process's namespace); sockets fn opens stay in this one.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the runtime ends the thread with the goroutine
		f, err := os.Open(n.Path())
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.Name, err)
			return
		}
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic in netns %s: %v", n.Name, r)
			}
		}()
		errc <- fn()
	}()
	return <-errc
}

// MustDo is Do, failing the test on error.
func (n *Netns) MustDo(t testing.TB, fn func() error) {
	t.Helper()
	if err := n.Do(fn); err != nil {
		t.Fatal(err)
	}
}

// DialContext dials from inside the namespace; the connection can then be
// used from any goroutine.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the namespace, closed at cleanup; it can
// then be used from any goroutine.
func (n *Netns) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	n.MustDo(t, func() (err error) {
		l, err = net.Listen(network, addr)
		if err != nil {
			return fmt.Errorf("listen %s %s in netns %s: %w", network, addr, n.Name, err)
		}
		return nil
	})
	t.Cleanup(func() { l.Close() })
	return l
}

// HTTPClient is an HTTP client whose connections are dialled inside the
// namespace (for a server on the namespace's loopback). No keep-alive: each
// request gets a fresh connection.
func (n *Netns) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true},
	}
}

// Veth joins a and b with a veth pair aDev-bDev and brings both ends up.
func Veth(t testing.TB, a *Netns, aDev string, b *Netns, bDev string) {
	t.Helper()
	a.MustRun(t, "ip", "link", "add", aDev, "type", "veth", "peer", "name", bDev, "netns", b.Name)
	a.MustRun(t, "ip", "link", "set", aDev, "up")
	b.MustRun(t, "ip", "link", "set", bDev, "up")
}

// AddAddr adds addr/bits to dev (IPv6 without duplicate address detection).
func (n *Netns) AddAddr(t testing.TB, dev, prefix string) {
	t.Helper()
	args := []string{"ip", "addr", "add", prefix, "dev", dev}
	if strings.Contains(prefix, ":") {
		args = append(args, "nodad")
	}
	n.MustRun(t, args...)
}
