//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/portal/steer"
	"github.com/kproxy/kproxy/test/netnstest"
)

// Services of the transparent-proxying test, each to a server on the
// backend that answers with the address it saw its client connect from.
// The backend stands in for two pods: the first address of each family on
// this node ("node"), the second on another node.
const (
	tpPort       = 80
	tpUDPPort    = 53
	tpBackendTCP = 9200
	tpBackendUDP = 9253
	tpNodePort   = 30661 // tp-local's node port
	tpETPPort    = 30662 // tp-etp's node port
)

var tpServices = []struct {
	name, annotation string // annotation "" is none
	local            bool   // the endpoint is on this node
	etpLocal         bool   // externalTrafficPolicy Local
	ip4, ip6         string
	lb4, lb6         string // LoadBalancer ingress IPs, "" for none
	nodePort         int
	clientSeen       bool // the endpoint sees the client's address
	udp              bool // a UDP port too ("dns"), on node port nodePort+2 if any
}{
	{"tp-local", "true", true, false, "198.18.0.61", "2001:db8:5::61", "198.18.2.61", "2001:db8:5::2:61", tpNodePort, true, true},
	{"tp-remote", "true", false, false, "198.18.0.62", "2001:db8:5::62", "", "", 0, false, true},
	{"tp-plain", "", true, false, "198.18.0.63", "2001:db8:5::63", "", "", 0, false, false},
	{"tp-bad", "yes", true, false, "198.18.0.64", "2001:db8:5::64", "", "", 0, false, false},
	// eTP Local: --preserve-source-ip-for-local-traffic-policy applies;
	// "false" opts a service out.
	{"tp-etp", "", true, true, "198.18.0.65", "2001:db8:5::65", "", "", tpETPPort, true, false},
	{"tp-optout", "false", true, true, "198.18.0.66", "2001:db8:5::66", "", "", 0, false, false},
}

// testTransparent: through a kernel portal (mode), with
// --preserve-source-ip-for-local-traffic-policy, a node-local endpoint of
// a service annotated kproxy.io/preserve-source-ip "true" (or of an
// externalTrafficPolicy Local service) sees the client's own address
// through the cluster IP, the node port and the load-balancer IP, over
// both families; an endpoint on another node still answers, seeing the
// node's address, and the state says so; unannotated, opted-out and
// badly annotated services' endpoints see the node's address, the bad
// value is logged and in the state. kproxy cleanup then leaves no mark
// rule, policy-routing rule or route.
func testTransparent(t *testing.T, bin, mode string) {
	e := newEnv(t, bin, mode)
	startPeerServer(t, e)
	e.writeTPManifest(t, nil)
	p := e.start(t, "--preserve-source-ip-for-local-traffic-policy")
	st := e.waitState(t, p, "transparent service ports listening", func(st map[string]spState) bool {
		for _, s := range tpServices {
			if sp, ok := st["e2e/"+s.name+":http/TCP"]; !ok || len(sp.ListenAddresses) == 0 || len(sp.Endpoints) != 2 {
				return false
			}
			if sp, ok := st["e2e/"+s.name+":dns/UDP"]; s.udp && (!ok || len(sp.ListenAddresses) == 0 || len(sp.Endpoints) != 2) {
				return false
			}
		}
		return true
	})
	var ips []string
	for _, s := range tpServices {
		ips = append(ips, s.ip4, s.ip6)
	}
	e.waitRules(t, ips, nil)

	nodeSeen := map[bool]netip.Addr{true: e.be.NodeIP4, false: e.be.NodeIP6}
	clientSeen := map[bool]netip.Addr{true: netnstest.ClientIP4, false: netnstest.ClientIP6}
	transparent := 0
	for _, s := range tpServices {
		type frontend struct {
			what, proto string
			addr        netip.AddrPort
		}
		var fronts []frontend
		for _, proto := range []string{"tcp", "udp"} {
			port, nodePort := tpPort, s.nodePort
			if proto == "udp" {
				if !s.udp {
					continue
				}
				port, nodePort = tpUDPPort, s.nodePort+2
			}
			fronts = append(fronts, frontend{"cluster IP", proto, svcAddr(s.ip4, port)}, frontend{"cluster IP", proto, svcAddr(s.ip6, port)})
			if s.lb4 != "" {
				fronts = append(fronts, frontend{"load-balancer IP", proto, svcAddr(s.lb4, port)}, frontend{"load-balancer IP", proto, svcAddr(s.lb6, port)})
			}
			if s.nodePort != 0 {
				fronts = append(fronts, frontend{"node port", proto, netip.AddrPortFrom(netnstest.NodeIP4, uint16(nodePort))},
					frontend{"node port", proto, netip.AddrPortFrom(netnstest.NodeIP6, uint16(nodePort))})
			}
		}
		for _, f := range fronts {
			v4 := f.addr.Addr().Is4()
			want := nodeSeen[v4]
			if s.clientSeen {
				want = clientSeen[v4]
				transparent++
			}
			got, err := askPeer(e, f.proto, f.addr)
			if err != nil {
				t.Errorf("%s %s %s %s: %v", s.name, f.proto, f.what, f.addr, err)
				continue
			}
			if got != want {
				t.Errorf("%s %s %s %s: the endpoint saw %s, want %s", s.name, f.proto, f.what, f.addr, got, want)
			}
		}
	}

	// A client on the endpoint's own link (a second pod on the same
	// bridge) would get the endpoint's reply directly, never through the
	// node: it is served from the node's address, and counted.
	for _, c := range []struct{ from, svc, want netip.Addr }{
		{e.be.IPs4[1], netip.MustParseAddr("198.18.0.61"), e.be.NodeIP4},
		{e.be.IPs6[1], netip.MustParseAddr("2001:db8:5::61"), e.be.NodeIP6},
	} {
		got, err := askPeerFrom(e.be.Netns, c.from, netip.AddrPortFrom(c.svc, tpPort))
		if err != nil || got != c.want {
			t.Errorf("tp-local from %s, on the endpoint's link: the endpoint saw %s (%v), want %s", c.from, got, err, c.want)
		}
	}
	if remote := st["e2e/tp-remote:http/TCP"].ServicePort.AnnotationErrors; !strings.Contains(strings.Join(remote, " "), "endpoints on other nodes see the node's address") ||
		!strings.Contains(strings.Join(remote, " "), e.be.IPs4[1].String()) {
		t.Errorf("state of e2e/tp-remote: annotationErrors %q, want its endpoints on other nodes named", remote)
	}
	if bad := st["e2e/tp-bad:http/TCP"].ServicePort.AnnotationErrors; !strings.Contains(strings.Join(bad, " "), `kproxy.io/preserve-source-ip: unknown value "yes"`) {
		t.Errorf("state of e2e/tp-bad: annotationErrors %q, want the unknown value \"yes\" named", bad)
	}
	for _, name := range []string{"tp-local", "tp-etp", "tp-plain", "tp-optout"} {
		if errs := st["e2e/"+name+":http/TCP"].ServicePort.AnnotationErrors; len(errs) != 0 {
			t.Errorf("state of e2e/%s: annotationErrors %q, want none", name, errs)
		}
	}
	waitLogged(t, p, "(Service e2e/tp-bad): annotation kproxy.io/preserve-source-ip: unknown value")
	metrics := e.metrics(t)
	if got := metricValue(metrics, "kproxy_transparent_connections_total"); got != transparent {
		t.Errorf("kproxy_transparent_connections_total %d, want %d (one per transparent request)", got, transparent)
	}
	if got := metricValue(metrics, `kproxy_transparent_fallbacks_total{reason="remote_endpoint"}`); got != 4 {
		t.Errorf(`kproxy_transparent_fallbacks_total{reason="remote_endpoint"} %d, want 4 (tp-remote, TCP and UDP, one per family)`, got)
	}
	if got := metricValue(metrics, `kproxy_transparent_fallbacks_total{reason="reply_bypass"}`); got != 2 {
		t.Errorf(`kproxy_transparent_fallbacks_total{reason="reply_bypass"} %d, want 2 (tp-local from the endpoint's link, one per family)`, got)
	}

	// The kernel refuses the client's address when no source port toward
	// the endpoint is left for it: with two ephemeral ports on the node,
	// two held connections take both, and the third is dialled from the
	// node's address (a source port space of its own), logged and counted.
	e.checkDialFailedFallback(t, p)

	// Changed while serving: tp-plain asks for the client's address, tp-etp
	// opts out. The listeners are served again with the new option
	// (polled: the state changes before the portal has served them again).
	e.writeTPManifest(t, map[string]string{"tp-plain": "true", "tp-etp": "false"})
	e.waitState(t, p, "annotations changed", func(st map[string]spState) bool {
		return st["e2e/tp-plain:http/TCP"].ServicePort.PreserveSourceIP && !st["e2e/tp-etp:http/TCP"].ServicePort.PreserveSourceIP
	})
	for _, c := range []struct {
		name, ip string
		want     map[bool]netip.Addr
	}{{"tp-plain", "198.18.0.63", clientSeen}, {"tp-etp", "198.18.0.65", nodeSeen}} {
		for _, v4 := range []bool{true, false} {
			addr := svcAddr(c.ip, tpPort)
			if !v4 {
				addr = svcAddr(strings.Replace(c.ip, "198.18.0.", "2001:db8:5::", 1), tpPort)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, err := askPeer(e, "tcp", addr)
				if err == nil && got == c.want[v4] {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("after the change, %s %s: the endpoint saw %s (%v), want %s", c.name, addr, got, err, c.want[v4])
					break
				}
				time.Sleep(50 * time.Millisecond) // polling: the re-serve has no event to await here
			}
		}
	}

	// The policy routing is there while kproxy runs. Deleted underneath,
	// it is noticed at the next check of the rules (every 10 s) and
	// programmed again with them.
	if rules, routes := e.policyRouting(t); len(rules) != 2 || len(routes) != 2 {
		t.Errorf("while kproxy runs: policy-routing rules %q and routes %q, want one of each per family", rules, routes)
	}
	e.tp.Node.MustRun(t, "ip", "-4", "rule", "del", "lookup", strconv.Itoa(steer.TransparentTable))
	deadline := time.Now().Add(25 * time.Second)
	for {
		rules, routes := e.policyRouting(t)
		if len(rules) == 2 && len(routes) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted IPv4 policy rule is not back within 25s: rules %q, routes %q", rules, routes)
		}
		time.Sleep(200 * time.Millisecond) // polling the kernel: no event to await
	}
	if got, err := askPeer(e, "tcp", svcAddr("198.18.0.61", tpPort)); err != nil || got != netnstest.ClientIP4 {
		t.Errorf("tp-local after the policy rule came back: the endpoint saw %s (%v), want %s", got, err, netnstest.ClientIP4)
	}
	if p.stop(t, syscall.SIGTERM) != 0 {
		t.Errorf("kproxy exited non-zero on SIGTERM")
	}
	// nft prints marks with eight hex digits, iptables-save without leading zeros.
	mark, replyMark := fmt.Sprintf("%#x", steer.TransparentMark), fmt.Sprintf("%#x", steer.TransparentReplyMark)
	if mode == "nftables" {
		mark, replyMark = fmt.Sprintf("0x%08x", steer.TransparentMark), fmt.Sprintf("0x%08x", steer.TransparentReplyMark)
	}
	if r := e.rules(t); !strings.Contains(r, mark) || !strings.Contains(r, replyMark) {
		t.Errorf("the %s rules lack the transparent marks %s and %s:\n%s", mode, mark, replyMark, r)
	}
	if out, err := e.tp.Node.Run(e.bin, "cleanup", "--portal", mode); err != nil {
		t.Fatalf("kproxy cleanup --portal %s: %v: %s", mode, err, out)
	}
	if rules, routes := e.policyRouting(t); len(rules) != 0 || len(routes) != 0 {
		t.Errorf("after kproxy cleanup: policy-routing rules %q and routes %q left", rules, routes)
	}
	if r := e.rules(t); strings.Contains(r, mark) || strings.Contains(r, replyMark) || strings.Contains(r, "kproxy") || strings.Contains(r, "KPROXY") {
		t.Errorf("%s rules left after kproxy cleanup (with the marks):\n%s", mode, r)
	}
}

// policyRouting lists, in the node, the rules (both families) that look up
// the transparent table and the routes (both families) in it.
func (e *env) policyRouting(t *testing.T) (rules, routes []string) {
	t.Helper()
	table := strconv.Itoa(steer.TransparentTable)
	for _, fam := range []string{"-4", "-6"} {
		out, err := e.tp.Node.Run("ip", fam, "rule", "list")
		if err != nil {
			t.Fatalf("ip %s rule list: %v: %s", fam, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "lookup "+table) || strings.Contains(l, fmt.Sprintf("fwmark %#x", steer.TransparentReplyMark)) {
				rules = append(rules, strings.TrimSpace(l))
			}
		}
		out, _ = e.tp.Node.Run("ip", fam, "route", "show", "table", table) // an empty table may not exist
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l != "" && !strings.Contains(l, "does not exist") {
				routes = append(routes, l)
			}
		}
	}
	return rules, routes
}

// metricValue reads one sample of the /metrics page (0 when absent).
func metricValue(page, name string) int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindStringSubmatch(page)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// askPeer connects from the client to addr, sends a line (a datagram)
// and returns the address the endpoint says its peer had.
func askPeer(e *env, proto string, addr netip.AddrPort) (netip.Addr, error) {
	if proto == "udp" {
		got, err := netnstest.Exchange(e.tp.Client, "udp", addr, []byte("ping\n"), 3*time.Second)
		if err != nil {
			return netip.Addr{}, err
		}
		return netip.ParseAddr(strings.TrimSpace(got))
	}
	return askPeerFrom(e.tp.Client, netip.Addr{}, addr)
}

// askPeerFrom is askPeer over TCP from ns, from its address src (any,
// when src is invalid).
func askPeerFrom(ns *netnstest.Netns, src netip.Addr, addr netip.AddrPort) (netip.Addr, error) {
	return askPeerWithin(ns, src, addr, 3*time.Second)
}

// askPeerWithin is askPeerFrom with the exchange's deadline given.
func askPeerWithin(ns *netnstest.Netns, src netip.Addr, addr netip.AddrPort, within time.Duration) (netip.Addr, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		d := net.Dialer{Timeout: within}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		c, err = d.Dial("tcp", addr.String())
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(within))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return netip.Addr{}, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.Addr{}, fmt.Errorf("read answer (so far %q): %w", line, err)
	}
	return netip.ParseAddr(strings.TrimSpace(line))
}

// startPeerServer runs, on the backend's first two addresses of each
// family, servers that answer a line (TCP) or a datagram (UDP) with their
// peer's address.
func startPeerServer(t *testing.T, e *env) {
	servePeers(t, e.be.Netns, []netip.Addr{e.be.IPs4[0], e.be.IPs4[1], e.be.IPs6[0], e.be.IPs6[1]}, tpBackendTCP, tpBackendUDP)
}

// servePeers runs, in ns on each of ips, servers that answer a line (TCP
// port tcp) or a datagram (UDP port udp) with their peer's address.
func servePeers(t *testing.T, ns *netnstest.Netns, ips []netip.Addr, tcp, udp uint16) {
	for _, ip := range ips {
		var pc net.PacketConn
		ns.MustDo(t, func() (err error) {
			pc, err = net.ListenPacket("udp", netip.AddrPortFrom(ip, udp).String())
			return err
		})
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 64*1024)
			for {
				_, peer, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo([]byte(peer.(*net.UDPAddr).AddrPort().Addr().Unmap().String()+"\n"), peer)
			}
		}()
		ln := ns.Listen(t, "tcp", netip.AddrPortFrom(ip, tcp).String())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
						return
					}
					peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
					fmt.Fprintf(c, "%s\n", peer)
				}()
			}
		}()
	}
}

// writeTPManifest writes the services of tpServices, each to the peer
// server on the backend's first (this node) or second (another node)
// address of each family, with its annotation or the one override gives.
func (e *env) writeTPManifest(t *testing.T, override map[string]string) {
	t.Helper()
	var b strings.Builder
	for _, s := range tpServices {
		ann, value := "", s.annotation
		if v, ok := override[s.name]; ok {
			value = v
		}
		if value != "" {
			ann = fmt.Sprintf(", annotations: {kproxy.io/preserve-source-ip: %q}", value)
		}
		typ, nodePort, status, etp, udpPort, udpSlicePort := "ClusterIP", "", "", "", "", ""
		if s.nodePort != 0 {
			typ, nodePort = "NodePort", fmt.Sprintf(", nodePort: %d", s.nodePort)
		}
		if s.udp {
			udpNodePort := ""
			if s.nodePort != 0 {
				udpNodePort = fmt.Sprintf(", nodePort: %d", s.nodePort+2)
			}
			udpPort = fmt.Sprintf("  - {name: dns, protocol: UDP, port: %d, targetPort: %d%s}\n", tpUDPPort, tpBackendUDP, udpNodePort)
			udpSlicePort = fmt.Sprintf(", {name: dns, protocol: UDP, port: %d}", tpBackendUDP)
		}
		if s.lb4 != "" {
			typ = "LoadBalancer"
			status = fmt.Sprintf("status:\n  loadBalancer:\n    ingress: [{ip: %q}, {ip: %q}]\n", s.lb4, s.lb6)
		}
		if s.etpLocal {
			if typ == "ClusterIP" {
				typ = "NodePort" // externalTrafficPolicy needs external traffic
			}
			etp = "\n  externalTrafficPolicy: Local"
		}
		node, i := "other", 1
		if s.local {
			node, i = "node", 0
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: e2e%[2]s}
spec:
  type: %[3]s%[4]s
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[5]s
  clusterIPs: ["%[5]s", "%[6]s"]
  ports:
  - {name: http, protocol: TCP, port: %[7]d, targetPort: %[8]d%[9]s}
%[14]s%[10]s---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-v4, namespace: e2e, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %[8]d}%[15]s]
endpoints: [{addresses: ["%[11]s"], conditions: {ready: true}, nodeName: %[13]s}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-v6, namespace: e2e, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: %[8]d}%[15]s]
endpoints: [{addresses: ["%[12]s"], conditions: {ready: true}, nodeName: %[13]s}]
`, s.name, ann, typ, etp, s.ip4, s.ip6, tpPort, tpBackendTCP, nodePort, status, e.be.IPs4[i], e.be.IPs6[i], node, udpPort, udpSlicePort)
	}
	e.replaceManifest(t, b.String())
}

// checkDialFailedFallback narrows the node's ephemeral ports to two, holds
// two connections to tp-local open (their transparent upstreams take
// both ports from the client's address), and wants a third to reach the
// endpoint from the node's address, with the fallback counted and logged.
func (e *env) checkDialFailedFallback(t *testing.T, p *proc) {
	t.Helper()
	old := strings.TrimSpace(e.tp.Node.MustRun(t, "sysctl", "-n", "net.ipv4.ip_local_port_range"))
	e.tp.Node.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40001")
	defer e.tp.Node.MustRun(t, "sysctl", "-qw", "net.ipv4.ip_local_port_range="+strings.Join(strings.Fields(old), " "))
	before := metricValue(e.metrics(t), `kproxy_transparent_fallbacks_total{reason="dial_failed"}`)
	svc := svcAddr("198.18.0.61", tpPort)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c, err := e.tp.Client.DialContext(ctx, "tcp", svc.String())
		cancel()
		if err != nil {
			t.Fatalf("held connection to %s: %v", svc, err)
		}
		defer c.Close() // the endpoint waits for a line: the upstream stays open
	}
	// kproxy dials when it accepts: wait until both upstreams hold their port.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := e.tp.Node.MustRun(t, "ss", "-Htn", "state", "established", "src", netnstest.ClientIP4.String())
		if strings.Count(out, "\n") >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel: no event to await
	}
	got, err := askPeer(e, "tcp", svc)
	if err != nil || got != e.be.NodeIP4 {
		t.Errorf("with the client's ports taken: the endpoint saw %s (%v), want the node's %s", got, err, e.be.NodeIP4)
	}
	if after := metricValue(e.metrics(t), `kproxy_transparent_fallbacks_total{reason="dial_failed"}`); after != before+1 {
		t.Errorf(`kproxy_transparent_fallbacks_total{reason="dial_failed"} went from %d to %d, want one more`, before, after)
	}
	waitLogged(t, p, "dial from the client's address failed, dialing from the node's")
}
