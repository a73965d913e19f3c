//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/cmd/kproxy/binarytest"
	"github.com/kproxy/kproxy/portal/netnstest"
)

// Services of the cost measurement: the same node-local endpoint server,
// reached plain, transparently, and with a PROXY v2 header, each on a port
// of its own (costBackendTCP + index): connections of one mode leave
// TIME_WAIT entries that would otherwise crowd the next mode's source
// ports (rounds where connect searched a full port range cost 3 ms of CPU
// per connection).
var costModes = []struct {
	name, annotation, ip string
}{
	{"plain", "", "198.18.0.71"},
	{"transparent", `kproxy.io/preserve-source-ip: "true"`, "198.18.0.72"},
	{"proxy-v2", `kproxy.io/proxy-protocol: "v2"`, "198.18.0.73"},
}

// Bounds of the measurement: rounds of connsPerRound connections per mode,
// interleaved (plain, transparent, proxy-v2, plain, ...), and no more than
// costTimeLimit in all.
const (
	costRounds        = 5
	costConnsPerRound = 2000
	costTimeLimit     = 2 * time.Minute
	costBackendTCP    = 9300
)

// TestTransparentCost measures what transparent proxying costs per
// connection beside the plain path and a PROXY v2 header: the real kproxy
// (nftables portal) in the node, the client in its namespace connecting
// one connection at a time through a cluster IP, reading the endpoint's
// one-line greeting and closing. Per round and mode: wall time per
// connection and kproxy's CPU time per connection (utime+stime of
// /proc/<pid>/stat). It reports the medians of the interleaved rounds.
// A measurement, not a check: run it with KPROXY_COST=1.
func TestTransparentCost(t *testing.T) {
	if os.Getenv("KPROXY_COST") == "" {
		t.Skip("a measurement: KPROXY_COST=1 runs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
	need(t, "nft")
	bin := binarytest.Build(t)
	e := newEnv(t, bin, "nftables")
	e.be.MustRun(t, "ip", "route", "add", "default", "via", e.be.NodeIP4.String())
	var b strings.Builder
	for i, m := range costModes {
		ln := e.be.Listen(t, "tcp", netip.AddrPortFrom(e.be.IPs4[0], uint16(costBackendTCP+i)).String())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.Write([]byte("ok\n"))
					io.Copy(io.Discard, c) // a PROXY header too
				}()
			}
		}()
		ann := ""
		if m.annotation != "" {
			ann = ", annotations: {" + m.annotation + "}"
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: cost-%[1]s, namespace: e2e%[2]s}
spec:
  clusterIP: %[3]s
  ports: [{name: http, protocol: TCP, port: 80, targetPort: %[4]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: cost-%[1]s, namespace: e2e, labels: {kubernetes.io/service-name: cost-%[1]s}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %[4]d}]
endpoints: [{addresses: ["%[5]s"], conditions: {ready: true}, nodeName: node}]
`, m.name, ann, m.ip, costBackendTCP+i, e.be.IPs4[0])
	}
	e.replaceManifest(t, b.String())
	p := e.start(t, "--log-level", "warn")
	var ips []string
	for _, m := range costModes {
		ips = append(ips, m.ip)
	}
	e.waitRules(t, ips, nil)
	for _, m := range costModes { // each answers, and warm
		if err := costConns(e.tp.Client, svcAddr(m.ip, 80), 100); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
	}
	wall := map[string][]float64{}
	cpu := map[string][]float64{}
	deadline := time.Now().Add(costTimeLimit)
	for round := 0; round < costRounds && time.Now().Before(deadline); round++ {
		for _, m := range costModes {
			cpu0 := procCPU(t, p.Cmd.Process.Pid)
			start := time.Now()
			if err := costConns(e.tp.Client, svcAddr(m.ip, 80), costConnsPerRound); err != nil {
				t.Fatalf("%s round %d: %v", m.name, round, err)
			}
			elapsed := time.Since(start)
			used := procCPU(t, p.Cmd.Process.Pid) - cpu0
			wall[m.name] = append(wall[m.name], float64(elapsed.Microseconds())/costConnsPerRound)
			cpu[m.name] = append(cpu[m.name], float64(used.Microseconds())/costConnsPerRound)
		}
	}
	for _, m := range costModes {
		t.Logf("%-12s %d rounds x %d connections: median %.1f µs wall, %.1f µs kproxy CPU per connection (rounds: wall %v, CPU %v)",
			m.name, len(wall[m.name]), costConnsPerRound, median(wall[m.name]), median(cpu[m.name]), rounded(wall[m.name]), rounded(cpu[m.name]))
	}
}

// costConns makes n connections to addr from ns, one after the other,
// each reading the greeting and closing; all from one thread in ns.
func costConns(ns *netnstest.Netns, addr netip.AddrPort, n int) error {
	return ns.Do(func() error {
		for i := range n {
			c, err := net.DialTimeout("tcp", addr.String(), 3*time.Second)
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			c.SetDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || line != "ok\n" {
				return fmt.Errorf("connection %d: read %q: %v", i, line, err)
			}
		}
		return nil
	})
}

// procCPU is the user and system CPU time pid used so far (all threads),
// from /proc/<pid>/stat, in clock ticks of 10 ms (USER_HZ 100).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounded(xs []float64) []string {
	var out []string
	for _, x := range xs {
		out = append(out, strconv.FormatFloat(x, 'f', 1, 64))
	}
	return out
}
