//go:build linux

package portal

// A small network-namespace harness for the kernel portal tests: a client
// namespace and a node namespace joined by a veth pair, addresses from
// 192.0.2.0/24 and 2001:db8::/64, service IPs from 198.18.0.0/15 and
// 2001:db8:5::/64 routed from the client via the node. Everything is
// deleted in t.Cleanup. Code runs "inside" a namespace on a goroutine
// locked to an OS thread that has setns'd into it: sockets keep the
// namespace they were created in, and a child process (nft, iptables)
// started from that thread inherits it (TestNetnsExecInheritsThread).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var netnsSeq atomic.Int32

// Addresses of the test topology.
var (
	clientIP4 = netip.MustParseAddr("192.0.2.1")
	nodeIP4   = netip.MustParseAddr("192.0.2.2")
	clientIP6 = netip.MustParseAddr("2001:db8::1")
	nodeIP6   = netip.MustParseAddr("2001:db8::2")
)

const (
	serviceRange4 = "198.18.0.0/15"
	serviceRange6 = "2001:db8:5::/64"
)

type netns struct {
	name string
}

// newNetns creates a namespace kpt-<pid>-<n>-<role>, deleted at cleanup.
// It skips the test when the kernel or the sandbox refuses namespaces.
func newNetns(t testing.TB, role string) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespace tests need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespace tests need iproute2's ip")
	}
	name := fmt.Sprintf("kpt-%d-%d-%s", os.Getpid(), netnsSeq.Add(1), role)
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err != nil {
		msg := strings.ToLower(string(out))
		if strings.Contains(msg, "permission denied") || strings.Contains(msg, "operation not permitted") || strings.Contains(msg, "not supported") || strings.Contains(msg, "invalid argument") {
			t.Skipf("kernel refuses network namespaces (ip netns add %s: %s)", name, strings.TrimSpace(string(out)))
		}
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &netns{name: name}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	n.mustRun(t, "ip", "link", "set", "lo", "up")
	// No duplicate address detection: addresses are usable at once.
	n.mustRun(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	return n
}

// run runs a command inside the namespace (ip netns exec).
func (n *netns) run(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (n *netns) mustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// do runs fn on a fresh OS thread that has joined the namespace. The
// thread stays locked and is thrown away when fn returns, so the namespace
// never leaks to other goroutines.
func (n *netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the runtime ends the thread with the goroutine
		f, err := os.Open("/var/run/netns/" + n.name)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic in netns %s: %v", n.name, r)
			}
		}()
		errc <- fn()
	}()
	return <-errc
}

func (n *netns) mustDo(t testing.TB, fn func() error) {
	t.Helper()
	if err := n.do(fn); err != nil {
		t.Fatal(err)
	}
}

// topology is a client and a node namespace joined by a veth pair.
type topology struct {
	client, node *netns
}

func newTopology(t testing.TB) *topology {
	t.Helper()
	tp := &topology{client: newNetns(t, "client"), node: newNetns(t, "node")}
	c, n := tp.client, tp.node
	c.mustRun(t, "ip", "link", "add", "kc0", "type", "veth", "peer", "name", "kn0", "netns", n.name)
	c.mustRun(t, "ip", "addr", "add", clientIP4.String()+"/24", "dev", "kc0")
	c.mustRun(t, "ip", "addr", "add", clientIP6.String()+"/64", "dev", "kc0", "nodad")
	n.mustRun(t, "ip", "addr", "add", nodeIP4.String()+"/24", "dev", "kn0")
	n.mustRun(t, "ip", "addr", "add", nodeIP6.String()+"/64", "dev", "kn0", "nodad")
	c.mustRun(t, "ip", "link", "set", "kc0", "up")
	n.mustRun(t, "ip", "link", "set", "kn0", "up")
	// The client reaches service IPs through the node; the node needs a
	// route for them too, or its own packets never reach the output hook.
	c.mustRun(t, "ip", "route", "add", serviceRange4, "via", nodeIP4.String())
	c.mustRun(t, "ip", "-6", "route", "add", serviceRange6, "via", nodeIP6.String())
	n.mustRun(t, "ip", "route", "add", serviceRange4, "dev", "kn0")
	n.mustRun(t, "ip", "-6", "route", "add", serviceRange6, "dev", "kn0")
	tp.setForwarding(t, false)
	return tp
}

func (tp *topology) setForwarding(t testing.TB, on bool) {
	v := "0"
	if on {
		v = "1"
	}
	// No ICMP redirects when forwarding: the node routes service IPs back out
	// of the interface they came in on, and the redirects would use up the
	// per-host ICMP rate limit that the reject's port unreachable needs.
	tp.node.mustRun(t, "sysctl", "-qw", "net.ipv4.ip_forward="+v, "net.ipv6.conf.all.forwarding="+v,
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.kn0.send_redirects=0")
}

// echoServers answers on a proxy port, TCP and UDP, IPv4 and IPv6, with
// "pp=<port>". The UDP socket answers from the address each datagram was
// sent to (IPV6_PKTINFO), as a userspace proxy behind redirect must.
type echoServers struct {
	port int
	tcp  net.Listener
	udp  *net.UDPConn
	wg   sync.WaitGroup
}

func startEcho(t testing.TB, ns *netns, port int, pktinfo bool) *echoServers {
	t.Helper()
	s := &echoServers{port: port}
	ns.mustDo(t, func() error {
		ln, err := net.Listen("tcp", net.JoinHostPort("::", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified, Port: port})
		if err != nil {
			ln.Close()
			return err
		}
		s.tcp, s.udp = ln, pc
		return nil
	})
	if pktinfo {
		rc, err := s.udp.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		}); err != nil || serr != nil {
			t.Fatalf("IPV6_RECVPKTINFO: %v %v", err, serr)
		}
	}
	reply := []byte("pp=" + strconv.Itoa(port))
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.tcp.Accept()
			if err != nil {
				return
			}
			c.Write(reply)
			c.Close()
		}
	}()
	go func() {
		defer s.wg.Done()
		buf, oob := make([]byte, 2048), make([]byte, 512)
		for {
			_, oobn, _, from, err := s.udp.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return
			}
			var out []byte
			if pktinfo {
				out = replyPktinfo(oob[:oobn])
			}
			s.udp.WriteMsgUDPAddrPort(reply, out, from)
		}
	}()
	t.Cleanup(func() {
		s.tcp.Close()
		s.udp.Close()
		s.wg.Wait()
	})
	return s
}

// replyPktinfo turns a received IPV6_PKTINFO (also given, v4-mapped, for
// IPv4 datagrams on a dual-stack socket) into the control message that
// sends the reply from that address.
func replyPktinfo(oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo {
			var info unix.Inet6Pktinfo
			copy(info.Addr[:], m.Data[:16])
			// Reply from the address, on whatever interface routing picks.
			b := make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
			h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
			h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
			h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
			copy(b[unix.CmsgLen(0):], info.Addr[:])
			return b
		}
	}
	return nil
}

// ask sends one request to addr from inside ns and returns the answer.
func ask(ns *netns, network string, addr netip.AddrPort, timeout time.Duration) (string, error) {
	var answer string
	err := ns.do(func() error {
		c, err := net.DialTimeout(network, addr.String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if network == "udp" {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			buf := make([]byte, 256)
			n, err := c.Read(buf)
			if err != nil {
				return err
			}
			answer = string(buf[:n])
			return nil
		}
		b, err := io.ReadAll(c)
		answer = string(b)
		return err
	})
	return answer, err
}

// expectAnswer asks addr and wants the echo of proxyPort.
func expectAnswer(t testing.TB, ns *netns, network string, addr netip.AddrPort, proxyPort int) {
	t.Helper()
	got, err := ask(ns, network, addr, 2*time.Second)
	if want := "pp=" + strconv.Itoa(proxyPort); err != nil || got != want {
		t.Errorf("%s %s from %s: got %q, %v; want %q", network, addr, ns.name, got, err, want)
	}
}

// expectRefused wants connection refused within a second: TCP reset, or
// ICMP port unreachable reported on a connected UDP socket. A UDP client on
// the node itself sees EPERM from send instead: the reject in the output
// hook drops its datagram (and the ICMP error follows).
func expectRefused(t testing.TB, ns *netns, network string, addr netip.AddrPort) {
	t.Helper()
	start := time.Now()
	got, err := ask(ns, network, addr, 3*time.Second)
	elapsed := time.Since(start)
	refused := errors.Is(err, syscall.ECONNREFUSED) || (network == "udp" && errors.Is(err, syscall.EPERM))
	if !refused || elapsed > time.Second {
		t.Errorf("%s %s from %s: got %q, %v after %v; want connection refused within 1s", network, addr, ns.name, got, err, elapsed)
	}
}

// expectNoAnswer wants no echo (any error, within the bounded timeout).
func expectNoAnswer(t testing.TB, ns *netns, network string, addr netip.AddrPort) {
	t.Helper()
	got, err := ask(ns, network, addr, time.Second)
	if err == nil {
		t.Errorf("%s %s from %s: got answer %q, want none", network, addr, ns.name, got)
	}
}

// TestNetnsExecInheritsThread checks the harness's premise: a process
// started from a goroutine locked to a thread in a namespace runs in that
// namespace, and others do not.
func TestNetnsExecInheritsThread(t *testing.T) {
	ns := newNetns(t, "exec")
	var fi syscall.Stat_t
	if err := syscall.Stat("/var/run/netns/"+ns.name, &fi); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]", fi.Ino)
	var inside string
	ns.mustDo(t, func() error {
		out, err := exec.CommandContext(context.Background(), "readlink", "/proc/self/ns/net").Output()
		inside = strings.TrimSpace(string(out))
		return err
	})
	if inside != want {
		t.Errorf("child of the locked thread is in %s, want %s", inside, want)
	}
	out, err := exec.Command("readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	if outside := strings.TrimSpace(string(out)); outside == want {
		t.Errorf("child of another goroutine is in the test namespace %s", outside)
	}
}
