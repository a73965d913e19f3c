//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/kproxy/kproxy/test/netnstest"
)

// Services of the PROXY protocol test: one per annotation value, dual-stack
// cluster IPs, each to the PROXY-reading server on the first backend
// address of each family.
const (
	ppPort       = 80
	ppBackendTCP = 9100
)

var ppServices = []struct {
	name, annotation string // annotation "" is none
	ip4, ip6         string
	version          byte // the header the endpoint must see; 0 none
}{
	{"pp-v1", "v1", "198.18.0.41", "2001:db8:5::41", 1},
	{"pp-v2", "v2", "198.18.0.42", "2001:db8:5::42", 2},
	{"pp-none", "", "198.18.0.43", "2001:db8:5::43", 0},
	{"pp-bad", "v3", "198.18.0.44", "2001:db8:5::44", 0},
}

// testProxyProtocol: through a kernel portal (mode), an endpoint of a service
// annotated kproxy.io/proxy-protocol v1 or v2 reads a PROXY header naming
// the client's own address and the cluster IP and port it connected to,
// over both families; an unannotated service's endpoint reads none; an
// unknown value is logged naming the service, is in its state, and the
// service serves without a header.
func testProxyProtocol(t *testing.T, bin, mode string) {
	e := newEnv(t, bin, mode)
	startPPServer(t, e)
	e.writePPManifest(t, nil)
	p := e.start(t)
	st := e.waitState(t, p, "PROXY protocol service ports listening", func(st map[string]spState) bool {
		for _, s := range ppServices {
			if sp, ok := st["e2e/"+s.name+":http/TCP"]; !ok || len(sp.ListenAddresses) == 0 || len(sp.Endpoints) != 2 {
				return false
			}
		}
		return true
	})
	var ips []string
	for _, s := range ppServices {
		ips = append(ips, s.ip4, s.ip6)
	}
	e.waitRules(t, ips, nil)
	for _, s := range ppServices {
		e.checkPP(t, s.name, s.ip4, s.ip6, s.version, 0)
	}
	// Two connections (one per family) with each version's header.
	metrics := e.metrics(t)
	for _, v := range []string{"v1", "v2"} {
		if want := `kproxy_proxy_protocol_connections_total{version="` + v + `"} 2`; !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	bad := st["e2e/pp-bad:http/TCP"]
	if !strings.Contains(strings.Join(bad.ServicePort.AnnotationErrors, " "), `"v3"`) {
		t.Errorf("state of e2e/pp-bad: servicePort.annotationErrors %q, want the unknown value \"v3\" named", bad.ServicePort.AnnotationErrors)
	}
	waitLogged(t, p, "annotation ignored")
	waitLogged(t, p, "(Service e2e/pp-bad): annotation kproxy.io/proxy-protocol: unknown value")

	// Changed while serving: pp-none asks for v2, pp-v1 for an unknown
	// value. The listeners are served again with the new option (polled:
	// the state changes before the portal has served them again).
	e.writePPManifest(t, map[string]string{"pp-none": "v2", "pp-v1": "v3"})
	e.waitState(t, p, "annotations changed", func(st map[string]spState) bool {
		return st["e2e/pp-none:http/TCP"].ServicePort.ProxyProtocol == "PROXY_PROTOCOL_V2" &&
			len(st["e2e/pp-v1:http/TCP"].ServicePort.AnnotationErrors) == 1
	})
	e.checkPP(t, "pp-none", ppServices[2].ip4, ppServices[2].ip6, 2, 5*time.Second)
	e.checkPP(t, "pp-v1", ppServices[0].ip4, ppServices[0].ip6, 0, 5*time.Second)
	waitLogged(t, p, "(Service e2e/pp-v1): annotation kproxy.io/proxy-protocol: unknown value")
}

// checkPP asks the service on both its cluster IPs, from the client, and
// wants the endpoint to have read a header of version (0: none) naming the
// client's address and the cluster IP and port; for up to wait, it asks
// again while the answer differs.
func (e *env) checkPP(t *testing.T, name, ip4, ip6 string, version byte, wait time.Duration) {
	t.Helper()
	for _, fam := range []struct {
		client netip.Addr
		svc    string
	}{{netnstest.ClientIP4, ip4}, {netnstest.ClientIP6, ip6}} {
		svc := svcAddr(fam.svc, ppPort)
		want := "none"
		if version != 0 {
			// The source port is the client's ephemeral one: only its address is compared.
			want = fmt.Sprintf("v%d %s %s", version, fam.client, svc)
		}
		deadline := time.Now().Add(wait)
		for {
			got, err := askPP(e, svc)
			if err == nil && got.header == want {
				break
			}
			if time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond) // polling: the change has no event to await here
				continue
			}
			if err != nil {
				t.Errorf("%s %s: %v", name, svc, err)
			} else {
				t.Errorf("%s %s from %s: endpoint read header %q, want %q", name, svc, fam.client, got.header, want)
			}
			break
		}
	}
}

// metrics is kproxy's /metrics page, read inside the node.
func (e *env) metrics(t *testing.T) string {
	t.Helper()
	resp, err := e.tp.Node.HTTPClient(2 * time.Second).Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return string(b)
}

type ppAnswer struct{ header string }

// askPP connects from the client to svc, sends a line, and returns what
// the PROXY-reading server says it read: "none", or "v<version> <source
// IP> <destination IP:port>".
func askPP(e *env, svc netip.AddrPort) (ppAnswer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := e.tp.Client.DialContext(ctx, "tcp", svc.String())
	if err != nil {
		return ppAnswer{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return ppAnswer{}, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return ppAnswer{}, fmt.Errorf("read answer (so far %q): %w", line, err)
	}
	rest, ok := strings.CutSuffix(line, " ping\n")
	if !ok {
		return ppAnswer{}, fmt.Errorf("answer %q does not end with the client's bytes", line)
	}
	return ppAnswer{header: rest}, nil
}

// startPPServer runs, on the first backend address of each family, a
// server that reads an optional PROXY header (go-proxyproto) and answers
// with it and the first line of the client's bytes after it.
func startPPServer(t *testing.T, e *env) {
	for _, ip := range []netip.Addr{e.be.IPs4[0], e.be.IPs6[0]} {
		ln := e.be.Listen(t, "tcp", netip.AddrPortFrom(ip, ppBackendTCP).String())
		pl := &proxyproto.Listener{Listener: ln, ReadHeaderTimeout: 5 * time.Second,
			ConnPolicy: func(proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) { return proxyproto.USE, nil }}
		go func() {
			for {
				c, err := pl.Accept()
				if err != nil {
					return
				}
				go servePP(c)
			}
		}()
	}
}

func servePP(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintf(c, "error %v\n", err)
		return
	}
	header := "none"
	if h := c.(*proxyproto.Conn).ProxyHeader(); h != nil {
		src, _ := h.SourceAddr.(*net.TCPAddr)
		dst, _ := h.DestinationAddr.(*net.TCPAddr)
		if src == nil || dst == nil {
			header = fmt.Sprintf("v%d non-TCP %v %v", h.Version, h.SourceAddr, h.DestinationAddr)
		} else {
			s, _ := netip.AddrFromSlice(src.IP)
			d, _ := netip.AddrFromSlice(dst.IP)
			header = fmt.Sprintf("v%d %s %s", h.Version, s.Unmap(), netip.AddrPortFrom(d.Unmap(), uint16(dst.Port)))
		}
	}
	fmt.Fprintf(c, "%s %s", header, line)
}

// writePPManifest writes the services of ppServices, each with its
// annotation or the one override gives it, to the PROXY-reading server.
func (e *env) writePPManifest(t *testing.T, override map[string]string) {
	t.Helper()
	var b strings.Builder
	for _, s := range ppServices {
		ann, value := "", s.annotation
		if v, ok := override[s.name]; ok {
			value = v
		}
		if value != "" {
			ann = fmt.Sprintf(", annotations: {kproxy.io/proxy-protocol: %q}", value)
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: e2e%[2]s}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: %[3]s
  clusterIPs: ["%[3]s", "%[4]s"]
  ports:
  - {name: http, protocol: TCP, port: %[5]d, targetPort: %[6]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-v4, namespace: e2e, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: %[6]d}]
endpoints: [{addresses: ["%[7]s"], conditions: {ready: true}, nodeName: backend}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-v6, namespace: e2e, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: %[6]d}]
endpoints: [{addresses: ["%[8]s"], conditions: {ready: true}, nodeName: backend}]
`, s.name, ann, s.ip4, s.ip6, ppPort, ppBackendTCP, e.be.IPs4[0], e.be.IPs6[0])
	}
	e.replaceManifest(t, b.String())
}
