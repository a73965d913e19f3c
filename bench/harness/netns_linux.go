//go:build linux

package harness

// The client-address scenario's network namespaces: a kernel portal
// rewrites packets on their way through a node, so the client, the node
// and the pod behind it each need a network stack of their own. This is
// the harness's own small version of test/netnstest, whose helpers
// belong to tests (testing.TB); the harness runs as a command.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netns is a named network namespace (ip netns) the harness created.
type netns struct{ name string }

// newNetns creates kpb-<pid>-<role> with loopback up and IPv6 duplicate
// address detection off.
func newNetns(role string) (*netns, error) {
	n := &netns{name: fmt.Sprintf("kpb-%d-%s", os.Getpid(), role)}
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", n.name, err, bytes.TrimSpace(out))
	}
	if err := n.run("ip", "link", "set", "lo", "up"); err != nil {
		n.del()
		return nil, err
	}
	return n, nil
}

// del removes the namespace; its veth ends and sockets go with it.
func (n *netns) del() error {
	if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.name, err, bytes.TrimSpace(out))
	}
	return nil
}

// run runs a command inside the namespace (ip netns exec).
func (n *netns) run(args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s (netns %s): %w: %s", strings.Join(args, " "), n.name, err, bytes.TrimSpace(out))
	}
	return nil
}

// enter moves the calling goroutine's OS thread into the namespace, for
// good: the caller has locked the goroutine to its thread and never
// unlocks it, so the runtime ends the thread with the goroutine and the
// namespace leaks to no other goroutine. Sockets opened on the thread
// stay in the namespace wherever they are used later.
func (n *netns) enter() error {
	f, err := os.Open("/var/run/netns/" + n.name)
	if err != nil {
		return fmt.Errorf("enter netns %s: %w", n.name, err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", n.name, err)
	}
	return nil
}

// do runs fn on a fresh OS thread inside the namespace; a process fn
// starts inherits the namespace from that thread.
func (n *netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread ends with the goroutine
		if err := n.enter(); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// veth joins a and b with a veth pair aDev-bDev, both ends up.
func veth(a *netns, aDev string, b *netns, bDev string) error {
	return errors.Join(
		a.run("ip", "link", "add", aDev, "type", "veth", "peer", "name", bDev, "netns", b.name),
		a.run("ip", "link", "set", aDev, "up"),
		b.run("ip", "link", "set", bDev, "up"))
}
