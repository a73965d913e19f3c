//go:build linux

package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

// The client-address scenario's network: a client namespace and a node
// namespace on one link, a pod namespace behind the node whose default
// route is the node (as a pod's is: the replies of transparent
// connections must come back through it). Documentation ranges only.
var (
	caClientIP  = netip.MustParseAddr("192.0.2.1")
	caNodeIP    = netip.MustParseAddr("192.0.2.2")
	caNodePodIP = netip.MustParseAddr("198.51.100.1")
	caPodIP     = netip.MustParseAddr("198.51.100.2")
)

const (
	caServiceRange = "198.18.0.0/15"
	caServicePort  = 80
	caNodeName     = "bench"
)

// caMode is one way of handing the client's address on (or not): a
// service of its own, with its annotation, to an endpoint port of its own
// (connections of one mode leave TIME_WAIT entries in the node's source
// port space toward that port, which would crowd another mode's).
type caMode struct {
	name       string
	annotation string // "" for none
	proxyProto bool   // the endpoint reads a PROXY header
	seesClient bool   // the endpoint is to see the client's address
}

var caModes = []caMode{
	{"plain", "", false, false},
	{"transparent", `kproxy.io/preserve-source-ip: "true"`, false, true},
	{"proxy-v1", `kproxy.io/proxy-protocol: "v1"`, true, true},
	{"proxy-v2", `kproxy.io/proxy-protocol: "v2"`, true, true},
}

func (m caMode) serviceIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + i)}) }
func (m caMode) podPort(i int) int          { return 9301 + i }

// runClientAddress runs the real kproxy with the nftables portal in a
// node namespace, clients in a client namespace, and measures each mode's
// connections (conn) and requests (keepalive) per second and kproxy's CPU
// per connection and request, in interleaved rounds, beside the plain path.
func runClientAddress(ctx context.Context, e *env, res *ScenarioResult) error {
	o := e.o
	if os.Geteuid() != 0 {
		res.Skipped = "needs root (network namespaces, nftables)"
		return nil
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			res.Skipped = "needs " + tool + " on PATH"
			return nil
		}
	}
	var loads []string
	for _, m := range []string{ModeConn, ModeKeepAlive} {
		if o.hasMode(m) {
			loads = append(loads, m)
		}
	}
	if len(loads) == 0 {
		return fmt.Errorf("want the load mode %s or %s (--modes)", ModeConn, ModeKeepAlive)
	}
	nw, err := newCANetwork()
	if err != nil {
		return err
	}
	defer nw.close()
	seen := make([]*seenAddrs, len(caModes))
	for i, m := range caModes {
		seen[i] = &seenAddrs{n: map[netip.Addr]*atomic.Int64{}}
		ln, err := nw.listenPod(m, i)
		if err != nil {
			return err
		}
		defer ln.Close()
		go serveCAEndpoint(ln, seen[i])
	}
	manifest := filepath.Join(e.dir, "services.yaml")
	if err := os.WriteFile(manifest, []byte(caManifest()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", manifest, err)
	}
	kp, err := nw.startKproxy(o, e.dir, manifest)
	if err != nil {
		return err
	}
	defer kp.Stop()
	targets := make([]target, len(caModes))
	for i, m := range caModes {
		targets[i] = target{name: m.name, proc: kp, addrs: []string{netip.AddrPortFrom(m.serviceIP(i), caServicePort).String()}}
		if err := nw.awaitServing(ctx, kp, targets[i].addrs[0], o.ReadyTimeout); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	// The counts are the load's, not the serving checks'.
	for _, s := range seen {
		s.reset()
	}
	plan := time.Duration(len(loads)*(o.Rounds+1)*len(caModes)) * o.Duration
	smp := startSampler(time.Now(), e.live, timelineInterval(plan), kp)
	defer func() { res.Timeline = smp.stop() }()
	for _, load := range loads {
		if err := e.clientAddressLoad(ctx, res, load, targets, nw.client.enter); err != nil {
			return err
		}
	}
	res.ClientAddress = &ClientAddressDetail{Client: caClientIP.String(), Node: caNodePodIP.String(), Seen: map[string]map[string]int64{}}
	var wrong []string
	for i, m := range caModes {
		counts := seen[i].counts()
		res.ClientAddress.Seen[m.name] = counts
		want := caNodePodIP
		if m.seesClient {
			want = caClientIP
		}
		for addr, n := range counts {
			if addr != want.String() {
				wrong = append(wrong, fmt.Sprintf("%s: %d connections seen from %s, want %s", m.name, n, addr, want))
			}
		}
		if counts[want.String()] == 0 {
			wrong = append(wrong, fmt.Sprintf("%s: no connection seen from %s", m.name, want))
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("kproxy run --portal nftables in a node namespace; a client namespace (%s) connects to a ClusterIP per mode, whose endpoint is a pod namespace behind the node (%s); the node dials it from %s unless the mode hands the client's address on. Each mode's endpoint counts the addresses it saw.",
		caClientIP, caPodIP, caNodePodIP))
	if len(o.Compare) > 0 {
		res.Notes = append(res.Notes, "client-address compares its modes with the plain path; --compare does not apply")
	}
	if len(wrong) > 0 {
		return fmt.Errorf("the endpoints saw the wrong addresses: %s", strings.Join(wrong, "; "))
	}
	return nil
}

// clientAddressLoad runs a warm-up and the rounds of one load mode over
// every client-address mode, their order rotating each round, and adds
// the figures: rate and kproxy's CPU per operation, per mode, and the
// CPU's ratio to the plain path's.
func (e *env) clientAddressLoad(ctx context.Context, res *ScenarioResult, load string, targets []target, enter func() error) error {
	o := e.o
	spec := loadSpec{Mode: load, Clients: o.Clients, Size: o.Size, PerConn: o.PerConn, MaxOps: o.MaxRequests, Enter: enter}
	g, err := e.interleave(ctx, res, "client-address "+load, spec, targets, func(t target, r int, round Round) {
		e.logf("  client-address %s %-11s round %d: %8.0f /s  %6.1f µs CPU/op  %d failed", load, t.name, r+1, round.OpsPerSecond, round.CPUMicrosPerOp, round.Errors)
	})
	if err != nil {
		return err
	}
	hists, rates, cpus := g.hists, g.rates, g.cpus
	var failed float64
	for _, f := range g.failed {
		failed += f
	}
	what, unit := "connections/s", "conn/s"
	per := "CPU per connection"
	if load == ModeKeepAlive {
		what, unit, per = "requests/s", "req/s", "CPU per request"
	}
	plainCPU := median(cpus[caModes[0].name])
	for _, t := range targets {
		res.Latency = append(res.Latency, curve(t.name, load, hists[t.name]))
		cpu := median(cpus[t.name])
		res.Figures = append(res.Figures,
			figure(fmt.Sprintf("%s %s: %s", load, t.name, what), unit, false, map[string]float64{TargetKproxy: median(rates[t.name])}),
			figure(fmt.Sprintf("%s %s: %s", load, t.name, per), "µs", true, map[string]float64{TargetKproxy: cpu}))
		if t.name != caModes[0].name && plainCPU > 0 {
			res.Figures = append(res.Figures,
				figure(fmt.Sprintf("%s %s: %s over plain", load, t.name, per), "ratio", true, map[string]float64{TargetKproxy: cpu / plainCPU}))
		}
	}
	res.Figures = append(res.Figures, figure(load+": failed requests", "", true, map[string]float64{TargetKproxy: failed}))
	return nil
}

// caNetwork is the scenario's three namespaces.
type caNetwork struct {
	client, node, pod *netns
}

// newCANetwork creates and wires the namespaces; on error, none is left.
func newCANetwork() (n *caNetwork, err error) {
	n = &caNetwork{}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	for _, ns := range []struct {
		p    **netns
		role string
	}{{&n.client, "client"}, {&n.node, "node"}, {&n.pod, "pod"}} {
		if *ns.p, err = newNetns(ns.role); err != nil {
			return n, err
		}
	}
	c, nd, p := n.client, n.node, n.pod
	steps := []error{
		veth(c, "kc0", nd, "kn0"),
		veth(p, "kp0", nd, "kn1"),
		c.run("ip", "addr", "add", caClientIP.String()+"/24", "dev", "kc0"),
		nd.run("ip", "addr", "add", caNodeIP.String()+"/24", "dev", "kn0"),
		nd.run("ip", "addr", "add", caNodePodIP.String()+"/24", "dev", "kn1"),
		p.run("ip", "addr", "add", caPodIP.String()+"/24", "dev", "kp0"),
		c.run("ip", "route", "add", caServiceRange, "via", caNodeIP.String()),
		// A node's own packets to service IPs need a route to reach the
		// output hook.
		nd.run("ip", "route", "add", caServiceRange, "dev", "kn0"),
		p.run("ip", "route", "add", "default", "via", caNodePodIP.String()),
		nd.run("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0"),
	}
	// Tens of thousands of short connections a round: the client's and
	// the node's connects may take every ephemeral port and reuse
	// TIME_WAIT ones (these namespaces' own settings), or connect would
	// search a full port range and its cost would swamp the proxy's.
	for _, ns := range []*netns{c, nd} {
		steps = append(steps, ns.run("sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535", "net.ipv4.tcp_tw_reuse=1"))
	}
	if err := errors.Join(steps...); err != nil {
		return n, fmt.Errorf("client-address network: %w", err)
	}
	return n, nil
}

// close deletes the namespaces.
func (n *caNetwork) close() {
	for _, ns := range []*netns{n.client, n.node, n.pod} {
		if ns != nil {
			ns.del()
		}
	}
}

// listenPod listens for mode i's endpoint in the pod namespace; a PROXY
// mode's listener requires the header.
func (n *caNetwork) listenPod(m caMode, i int) (net.Listener, error) {
	var ln net.Listener
	err := n.pod.do(func() (err error) {
		ln, err = listenConfig.Listen(context.Background(), "tcp", netip.AddrPortFrom(caPodIP, uint16(m.podPort(i))).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s endpoint: %w", m.name, err)
	}
	if m.proxyProto {
		ln = &proxyproto.Listener{Listener: ln, ReadHeaderTimeout: requestTimeout}
	}
	return ln, nil
}

// listenConfig: no TCP keepalive on accepted connections, as the
// harness's other backends.
var listenConfig = net.ListenConfig{KeepAlive: -1}

// serveCAEndpoint is an endpoint as the load expects one (it writes its
// name, then echoes until EOF) that counts the client addresses it sees.
func serveCAEndpoint(ln net.Listener, seen *seenAddrs) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // one connection's failure (a bad PROXY header); the listener is good
		}
		go func() {
			defer c.Close()
			// A PROXY connection's first write reads the header first.
			if _, err := io.WriteString(c, "pod\n"); err != nil {
				return
			}
			// Counted once a request arrives: a connection the proxy
			// opened and gave up (a dial it raced, for a client gone)
			// carries none, nor a header.
			buf := make([]byte, 4096)
			n, err := c.Read(buf)
			if n == 0 {
				return
			}
			if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
				seen.add(ta.AddrPort().Addr().Unmap())
			}
			if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
				return
			}
			io.Copy(c, c)
		}()
	}
}

// seenAddrs counts connections by the client address an endpoint saw.
type seenAddrs struct {
	mu sync.Mutex
	n  map[netip.Addr]*atomic.Int64
}

func (s *seenAddrs) add(a netip.Addr) {
	s.mu.Lock()
	c := s.n[a]
	if c == nil {
		c = &atomic.Int64{}
		s.n[a] = c
	}
	s.mu.Unlock()
	c.Add(1)
}

func (s *seenAddrs) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.n)
}

func (s *seenAddrs) counts() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for a, c := range s.n {
		out[a.String()] = c.Load()
	}
	return out
}

// caManifest is a ClusterIP service per mode, with its annotation, to
// its port on the pod, an endpoint on this node.
func caManifest() string {
	var b strings.Builder
	for i, m := range caModes {
		ann := ""
		if m.annotation != "" {
			ann = ", annotations: {" + m.annotation + "}"
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: ca-%[1]s, namespace: bench%[2]s}
spec:
  clusterIP: %[3]s
  ports: [{name: tcp, protocol: TCP, port: %[4]d, targetPort: %[5]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ca-%[1]s, namespace: bench, labels: {kubernetes.io/service-name: ca-%[1]s}}
addressType: IPv4
ports: [{name: tcp, protocol: TCP, port: %[5]d}]
endpoints: [{addresses: ["%[6]s"], conditions: {ready: true}, nodeName: %[7]s}]
`, m.name, ann, m.serviceIP(i), caServicePort, m.podPort(i), caPodIP, caNodeName)
	}
	return b.String()
}

// startKproxy runs kproxy with the nftables portal in the node namespace
// (started from a thread inside it, which the process inherits) on the
// manifest, with the --kproxy-arg flags.
func (n *caNetwork) startKproxy(o *Options, dir, manifest string) (*Proc, error) {
	args := []string{o.Kproxy, "run", "--source", "file:" + manifest, "--portal", "nftables",
		"--node-name", caNodeName, "--healthz-bind-address", "", "--metrics-bind-address", "127.0.0.1:10249",
		"--log-format", "json", "--log-level", "warn",
		"--proxy-ports-file", filepath.Join(dir, "proxy-ports.json")}
	args = append(args, o.KproxyArgs...)
	var p *Proc
	err := n.node.do(func() (err error) {
		p, err = startProc(TargetKproxy, filepath.Join(dir, "kproxy.log"), args, o.KproxyEnv)
		return err
	})
	return p, err
}

// awaitServing polls addr from the client namespace until a connection
// gets the endpoint's name (kproxy announces no rule or listener per
// service), or timeout passes, or kproxy exits.
func (n *caNetwork) awaitServing(ctx context.Context, p *Proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	return n.client.do(func() error {
		var last error
		for {
			if last = askName(addr); last == nil {
				return nil
			}
			select {
			case <-p.Done():
				return p.exitError()
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond): // polling: nothing to await
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not serving within %v: %w", addr, timeout, last)
			}
		}
	})
}

// askName connects, reads the endpoint's name line and closes.
func askName(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read name (so far %q): %w", line, err)
	}
	if line != "pod\n" {
		return errors.New("unexpected name " + strconv.Quote(line))
	}
	return nil
}
