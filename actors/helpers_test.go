package actors

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kproxy/kproxy/portal/datapath"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/actortest"
	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/watcher"
)

func startProxy(t *testing.T) *Proxy {
	t.Helper()
	return startProxyWith(t, Config{})
}

// startProxyWith starts cfg on loopback with the test's logger.
func startProxyWith(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	cfg.BindAddress, cfg.Log = "127.0.0.1", zerolog.New(zerolog.NewTestWriter(t)).Level(testLogLevel)
	cfg.TCPEventLoops = datapath.EventLoopsSupported // as kproxy run by default
	p := Start(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return p
}

// stateWaiter waits for conditions on the latest ServicePortStates the
// Proxier published.
type stateWaiter struct{ *actortest.States }

func watchState(t *testing.T, p *Proxy) *stateWaiter {
	return &stateWaiter{actortest.WatchStates(t, p.Subscribe)}
}

// wait blocks until ok holds for the latest states, or fails the test.
func (w *stateWaiter) wait(t *testing.T, what string, ok func(map[string]*messages.ServicePortState) bool) {
	t.Helper()
	w.Wait(t, what, ok)
}

// listening waits until the service port of key listens on n addresses at generation gen.
func (w *stateWaiter) listening(t *testing.T, id string, n int, gen int64) *messages.ServicePortState {
	t.Helper()
	var st *messages.ServicePortState
	w.wait(t, fmt.Sprintf("%s listening on %d addresses at generation %d", id, n, gen), func(m map[string]*messages.ServicePortState) bool {
		st = m[id]
		return st != nil && !st.GetDeleted() && len(st.GetListenAddresses()) == n && st.GetGeneration() >= gen
	})
	return st
}

func key(name string, proto messages.Protocol) *messages.ServicePortKey {
	return &messages.ServicePortKey{Namespace: "default", Name: name, PortName: "p", Protocol: proto}
}

func svcPort(name string, proto messages.Protocol, clusterIP string, port int) *messages.ServicePort {
	return &messages.ServicePort{
		Key: key(name, proto), Type: "ClusterIP", Port: int32(port), TargetPort: int32(port),
		ClusterIps: &messages.IPSet{V4: []string{clusterIP}},
	}
}

func endpoints(addrs ...string) []*messages.Endpoint {
	var eps []*messages.Endpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		eps = append(eps, &messages.Endpoint{Ips: []string{host}, Port: int32(p), Ready: true, Serving: true, Internal: true, External: true})
	}
	return eps
}

// startBackends starts n loopback backends named backend-0.. and returns
// their addresses.
func startBackends[B interface {
	Addr() string
	Close()
}](t *testing.T, n int, start func(name, addr string) (B, error)) []string {
	t.Helper()
	var addrs []string
	for i := range n {
		b, err := start(fmt.Sprintf("backend-%d", i), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		addrs = append(addrs, b.Addr())
	}
	return addrs
}

func tcpBackends(t *testing.T, n int) []string { return startBackends(t, n, backends.StartTCP) }
func udpBackends(t *testing.T, n int) []string { return startBackends(t, n, backends.StartUDP) }

// snapshot is a whole desired state, as one reload of a file source; gen
// is the generation the Watcher gives it when each snapshot changes something.
type testSnapshot struct {
	gen  int64
	spes []*messages.ServicePortEndpoints
}

func snapshot(gen int64, spes ...*messages.ServicePortEndpoints) testSnapshot {
	return testSnapshot{gen, spes}
}

// Submit replaces the desired state in the proxy's Store (Config.View left
// nil) and has the Watcher resync at once, as the file source's reload
// does without its coalescing window.
func (p *Proxy) Submit(snap testSnapshot) {
	p.cfg.View.(*watcher.Store).Replace(snap.spes, nil, false)
	p.SourceSynced()
}

func spe(sp *messages.ServicePort, eps []*messages.Endpoint) *messages.ServicePortEndpoints {
	return &messages.ServicePortEndpoints{ServicePort: sp, Endpoints: eps}
}

func itoa[T ~int | ~int32](v T) string { return strconv.Itoa(int(v)) }

var testLogLevel = func() zerolog.Level {
	if os.Getenv("KPROXY_TEST_DEBUG") != "" {
		return zerolog.DebugLevel
	}
	return zerolog.WarnLevel
}()

// stickyFirst is n TCP service ports, name-i on fmt.Sprintf(ipFormat, i+1)
// and port, all with addrs as endpoints; the first has ClientIP affinity
// (the crash tests check its pin).
func stickyFirst(n int, name, ipFormat string, port int, addrs []string) []*messages.ServicePortEndpoints {
	spes := make([]*messages.ServicePortEndpoints, 0, n)
	for i := range n {
		sp := svcPort(fmt.Sprintf("%s-%d", name, i), messages.Protocol_TCP, fmt.Sprintf(ipFormat, i+1), port)
		if i == 0 {
			sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
		}
		spes = append(spes, spe(sp, endpoints(addrs...)))
	}
	return spes
}
