//go:build linux

package conformance

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

// exposureManifest is TestExposure's services, one of every type.
const exposureManifest = "exposure.yaml"

// What may answer on the node's addresses from another host with the
// exposure manifest loaded: its node ports, its health-check node port
// and /healthz (--healthz-bind-address's default, 0.0.0.0:10256).
var (
	exposedTCP = []int{30080, 30081, 30082, 30100, 10256}
	exposedUDP = []int{30053, 30054}
)

// TestExposure is the node's attack surface, against the real binary in
// each kernel portal mode, with a service of every type loaded
// (testdata/exposure.yaml). From another host: a TCP connect scan of every
// port of the node's IPv4 and IPv6 address, and a datagram to every port
// of the ephemeral range, where proxy ports come from; only node ports,
// the health-check node port and /healthz may answer, and every other TCP
// port must refuse, as a port nobody listens on does. Then each proxy
// port itself, dialled from another host, from a pod, and from an
// unprivileged process on the node, must refuse (TCP reset, ICMP port
// unreachable), and kproxy counts those attempts in
// kproxy_proxy_port_unredirected_packets_total. Throughout, the services
// answer through their own addresses.
func TestExposure(t *testing.T) {
	inEachKernelMode(t, []string{"nft", "iptables-save", "ip6tables-save", "perl", "setpriv"}, testExposure)
}

// inEachKernelMode runs test against the kproxy binary with the nftables
// and with the iptables portal, in parallel; as root, with tools
// installed, and where the kernel allows network namespaces (it skips
// otherwise, before building kproxy).
func inEachKernelMode(t *testing.T, tools []string, test func(t *testing.T, bin, mode string)) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables, iptables)")
	}
	netnstest.New(t, "probe")
	for _, name := range tools {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not installed: %v", name, err)
		}
	}
	bin := binarytest.Build(t)
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			test(t, bin, mode)
		})
	}
}

func testExposure(t *testing.T, bin, mode string) {
	m, err := readManifest(exposureManifest)
	if err != nil {
		t.Fatal(err)
	}
	tp := newTopology(t, []int{80, 53})
	startBackends(t, tp, m)
	// No ICMP rate limit on the node: each refused datagram gets its port
	// unreachable, however many the scan sent before.
	tp.node.MustRun(t, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0")
	in := startKproxy(t, bin, mode, tp, m.text(false), []string{"--cluster-cidr", clusterCIDRs})
	if err := in.awaitReady(m, false); err != nil {
		t.Fatal(err)
	}
	tcpPorts, udpPorts := in.proxyPorts(t)
	t.Logf("proxy ports: TCP %v, UDP %v", tcpPorts, udpPorts)

	expectServed(t, tp, "before the scan")
	external := sourceIPs4[fromExternal]
	for _, node := range []netip.Addr{nodeIP4, nodeIP6} {
		src := external
		if node.Is6() {
			src = sourceIPs6[fromExternal]
		}
		for port, got := range scanTCP(t, tp.out, src, node) {
			if !slices.Contains(exposedTCP, port) {
				t.Errorf("%s: TCP port %d of %s from another host: %s, want refused (only node ports, health-check node ports and /healthz answer)", mode, port, node, got)
			}
		}
		first, last := ephemeralRange(t, tp.node)
		if answered := sweepUDP(t, tp.out, src, node, first, last); len(without(answered, exposedUDP)) > 0 {
			t.Errorf("%s: UDP ports %d-%d of %s that answered another host: %v", mode, first, last, node, answered)
		}
	}

	// From a pod: its node's address on the pods' link.
	for port, got := range scanTCP(t, tp.pods, sourceIPs4[fromPodHere], netip.MustParseAddr("198.51.100.1")) {
		if !slices.Contains(exposedTCP, port) {
			t.Errorf("%s: TCP port %d of the node from a pod: %s, want refused", mode, port, got)
		}
	}
	// User nobody cannot join a proxy port's sockets (SO_REUSEPORT needs
	// the same user), so it cannot take a share of its connections.
	var binds []string
	for _, p := range tcpPorts {
		binds = append(binds, probeTarget("bind-tcp", "::", p))
	}
	for _, p := range udpPorts {
		binds = append(binds, probeTarget("bind-udp", "::", p))
	}
	for target, got := range probeAsNobody(t, tp.node, binds) {
		if got != "in use" {
			t.Errorf("%s: user nobody binding proxy port %s with SO_REUSEPORT: %s, want in use", mode, target, got)
		}
	}

	before := in.unredirected(t)
	attempts := 0
	refuse := func(who string, results map[string]string) {
		for target, got := range results {
			attempts++
			if got != "refused" {
				t.Errorf("%s: %s to proxy port %s: %s, want refused", mode, who, target, got)
			}
		}
	}
	var targets []string
	for _, ip := range []string{"192.0.2.2", "2001:db8::2"} {
		for _, p := range tcpPorts {
			targets = append(targets, probeTarget("tcp", ip, p))
		}
		for _, p := range udpPorts {
			targets = append(targets, probeTarget("udp", ip, p))
		}
	}
	refuse("another host", probeFrom(tp, fromExternal, targets))
	podTargets := slices.Clone(targets)
	for _, p := range tcpPorts {
		podTargets = append(podTargets, probeTarget("tcp", "198.51.100.1", p)) // the node's address on the pods' link
	}
	refuse("a pod", probeFrom(tp, fromPodHere, podTargets))
	localTargets := slices.Clone(targets)
	for _, ip := range []string{"127.0.0.1", "::1"} {
		for _, p := range tcpPorts {
			localTargets = append(localTargets, probeTarget("tcp", ip, p))
		}
		for _, p := range udpPorts {
			localTargets = append(localTargets, probeTarget("udp", ip, p))
		}
	}
	refuse("user nobody on the node", probeAsNobody(t, tp.node, localTargets))
	if after := in.unredirected(t); after-before < float64(attempts) {
		t.Errorf("%s: kproxy_proxy_port_unredirected_packets_total went from %v to %v over %d refused attempts", mode, before, after, attempts)
	}
	expectServed(t, tp, "after the scan")
	if t.Failed() {
		t.Logf("%s rules:\n%s", mode, in.rules())
	}
}

// expectServed: the services answer through their own addresses from
// another host, a pod and user nobody on the node.
func expectServed(t *testing.T, tp *topology, when string) {
	t.Helper()
	for _, c := range []struct {
		from        source
		proto, to   string
		want        string
		description string
	}{
		{fromExternal, "tcp", "203.0.113.204:80", "198.51.100.13:80", "LB IP within its source ranges"},
		{fromExternal, "tcp", "192.0.2.2:30080", "198.51.100.12:80", "node port"},
		{fromExternal, "udp", "192.0.2.2:30053", "198.51.100.12:53", "UDP node port"},
		{fromExternal, "tcp", "203.0.113.205:80", "198.51.100.14:80", "externalTrafficPolicy Local LB IP"},
		{fromPodHere, "tcp", "198.18.1.10:80", "198.51.100.11:80", "cluster IP"},
		{fromPodHere, "udp", "198.18.1.10:53", "198.51.100.11:53", "UDP cluster IP"},
		{fromPodHere, "tcp", "198.18.1.14:80", "198.51.100.21:80", "internalTrafficPolicy Local cluster IP"},
	} {
		dst := netip.MustParseAddrPort(c.to)
		ns, src, err := tp.from(c.from, false)
		if err != nil {
			t.Fatal(err)
		}
		if o := probe(ns, c.proto, src, dst, answerWithin); o.kind != "answer" || o.who != c.want {
			t.Errorf("%s: %s %s %s from %s: got %s, want %s", when, c.description, c.proto, c.to, c.from, o, c.want)
		}
	}
	got := probeAsNobody(t, tp.node, []string{probeTarget("tcp", "198.18.1.10", 80)})
	if g := got[probeTarget("tcp", "198.18.1.10", 80)]; g != "open" {
		t.Errorf("%s: user nobody on the node to cluster IP 198.18.1.10:80: %s, want open", when, g)
	}
}

// proxyPorts lists the proxy ports kproxy's admin API reports, by protocol.
func (in *instance) proxyPorts(t *testing.T) (tcp, udp []int) {
	t.Helper()
	type port struct {
		Key struct {
			Protocol string `json:"protocol"`
		} `json:"key"`
		ProxyPort         int  `json:"proxyPort"`
		ExternalProxyPort int  `json:"externalProxyPort"`
		Deleted           bool `json:"deleted"`
	}
	sps, err := binarytest.State[port](in.tp.node.HTTPClient(2*time.Second), binarytest.AdminAddress, in.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range sps {
		for _, p := range []int{sp.ProxyPort, sp.ExternalProxyPort} {
			switch {
			case p == 0 || sp.Deleted:
			case sp.Key.Protocol == "UDP":
				udp = append(udp, p)
			default:
				tcp = append(tcp, p)
			}
		}
	}
	if len(tcp) == 0 || len(udp) == 0 {
		t.Fatalf("no proxy ports in kproxy's state: TCP %v, UDP %v", tcp, udp)
	}
	return tcp, udp
}

// unredirected reads kproxy_proxy_port_unredirected_packets_total from
// kproxy's metrics (127.0.0.1:10249 in the node).
func (in *instance) unredirected(t *testing.T) float64 {
	t.Helper()
	const name = "kproxy_proxy_port_unredirected_packets_total"
	resp, err := in.tp.node.HTTPClient(10 * time.Second).Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("%s not among kproxy's metrics", name)
	return 0
}

// scanTCP connects from src in ns to every port of dst and returns what
// each port that did not refuse did: "open", "silent" (no answer within a
// second) or the error.
func scanTCP(t *testing.T, ns *netnstest.Netns, src, dst netip.Addr) map[int]string {
	t.Helper()
	const workers = 64
	ports := make(chan int, 1024)
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker's sockets are made on its own thread in ns.
			errc <- ns.Do(func() error {
				d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
				for p := range ports {
					c, err := d.Dial("tcp", netip.AddrPortFrom(dst, uint16(p)).String())
					result := ""
					switch {
					case err == nil:
						c.Close()
						result = "open"
					case errors.Is(err, syscall.ECONNREFUSED):
						continue
					case isTimeout(err):
						result = "silent"
					default:
						result = err.Error()
					}
					mu.Lock()
					got[p] = result
					mu.Unlock()
				}
				return nil
			})
		}()
	}
	start := time.Now()
	for p := 1; p <= 65535; p++ {
		ports <- p
	}
	close(ports)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("scanning %s: %v", dst, err)
		}
	}
	t.Logf("TCP scan of %s from %s: 65535 ports in %v; not refused: %v", dst, src, time.Since(start).Round(time.Millisecond), got)
	return got
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sweepUDP sends one datagram from src in ns to each port first-last of
// dst and collects, until a second of silence, the ports whose answer came
// back.
func sweepUDP(t *testing.T, ns *netnstest.Netns, src, dst netip.Addr, first, last int) []int {
	t.Helper()
	var answered []int
	ns.MustDo(t, func() error {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadBuffer(4 << 20)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				c.SetReadDeadline(time.Now().Add(time.Second))
				_, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				answered = append(answered, int(from.Port()))
			}
		}()
		for p := first; p <= last; p++ {
			if _, err := c.WriteToUDPAddrPort([]byte("ping"), netip.AddrPortFrom(dst, uint16(p))); err != nil {
				return fmt.Errorf("send to port %d: %w", p, err)
			}
			if p%256 == 0 {
				time.Sleep(time.Millisecond) // bounded rate: about 250,000 datagrams a second at most
			}
		}
		<-done
		return nil
	})
	slices.Sort(answered)
	t.Logf("UDP sweep of %s ports %d-%d from %s: answered %v", dst, first, last, src, answered)
	return slices.Compact(answered)
}

// ephemeralRange is the node's net.ipv4.ip_local_port_range, where proxy
// ports come from.
func ephemeralRange(t *testing.T, node *netnstest.Netns) (first, last int) {
	t.Helper()
	f := strings.Fields(node.MustRun(t, "sysctl", "-n", "net.ipv4.ip_local_port_range"))
	if len(f) != 2 {
		t.Fatalf("ip_local_port_range: %q", f)
	}
	first, _ = strconv.Atoi(f[0])
	last, _ = strconv.Atoi(f[1])
	return first, last
}

func probeTarget(proto, ip string, port int) string {
	return proto + "," + ip + "," + strconv.Itoa(port)
}

// probeFrom dials each target ("proto,ip,port") from the source s's
// namespace and address of the target's family: "open" (TCP connected;
// UDP answered), "refused", "silent", or the error.
func probeFrom(tp *topology, s source, targets []string) map[string]string {
	out := map[string]string{}
	for _, target := range targets {
		f := strings.Split(target, ",")
		port, _ := strconv.Atoi(f[2])
		dst := netip.AddrPortFrom(netip.MustParseAddr(f[1]), uint16(port))
		ns, from, err := tp.from(s, dst.Addr().Is6())
		if err != nil {
			out[target] = err.Error()
			continue
		}
		o := probe(ns, f[0], from, dst, rejectWithin)
		switch o.kind {
		case "refused":
			out[target] = "refused"
			if !errors.Is(o.err, syscall.ECONNREFUSED) {
				out[target] = o.String()
			}
		case "timeout":
			out[target] = "silent"
		case "answer", "other", "reset":
			out[target] = "open (" + o.String() + ")"
		default:
			out[target] = o.String()
		}
	}
	return out
}

// nobodyProbe dials each target ("proto,ip,port") and prints the target
// and "open" (TCP connected; UDP answered), "refused", "silent" or the
// error; a target "bind-tcp,ip,port" or "bind-udp,..." binds ip:port with
// SO_REUSEPORT instead: "bound" or "in use". perl, from perl-base, as
// user nobody.
const nobodyProbe = `use IO::Socket::IP; use Socket qw(SOCK_STREAM SOCK_DGRAM); $| = 1;
for my $t (@ARGV) {
  my ($proto, $host, $port) = split /,/, $t;
  if ($proto =~ /^bind-(tcp|udp)$/) {
    my $l = IO::Socket::IP->new(LocalHost => $host, LocalPort => $port, Proto => $1, ReusePort => 1,
      ($1 eq "tcp" ? (Listen => 1) : ()));
    print "$t ", ($l ? "bound" : ($!{EADDRINUSE} ? "in use" : "error: $!")), "\n";
    next;
  }
  my $s = IO::Socket::IP->new(PeerHost => $host, PeerPort => $port, Proto => $proto,
    Type => ($proto eq "udp" ? SOCK_DGRAM : SOCK_STREAM), Timeout => 1);
  if (!$s) { print "$t ", ($!{ECONNREFUSED} ? "refused" : "error: $!"), "\n"; next; }
  if ($proto eq "tcp") { print "$t open\n"; close $s; next; }
  $s->send("ping");
  my $rin = ''; vec($rin, fileno($s), 1) = 1;
  if (select(my $rout = $rin, undef, undef, 1) > 0) {
    my $buf = ''; my $r = $s->recv($buf, 2048);
    print "$t ", (defined $r ? "open" : ($!{ECONNREFUSED} ? "refused" : "error: $!")), "\n";
  } else { print "$t silent\n"; }
  close $s;
}`

// probeAsNobody runs nobodyProbe in ns as user nobody (65534): a local
// process without privileges.
func probeAsNobody(t *testing.T, ns *netnstest.Netns, targets []string) map[string]string {
	t.Helper()
	args := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "perl", "-e", nobodyProbe}, targets...)
	cmd := ns.Command(t.Context(), "setpriv", args...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("probe as nobody: %v %s", err, stderr)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		target, result, _ := strings.Cut(sc.Text(), " ")
		got[target] = result
	}
	for _, target := range targets {
		if _, ok := got[target]; !ok {
			t.Fatalf("probe as nobody said nothing of %s:\n%s", target, out)
		}
	}
	return got
}

// without is ports less those in allowed.
func without(ports, allowed []int) []int {
	var out []int
	for _, p := range ports {
		if !slices.Contains(allowed, p) {
			out = append(out, p)
		}
	}
	return out
}
