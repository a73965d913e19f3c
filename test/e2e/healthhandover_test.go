//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

const (
	hcOpenLog   = "health-check node port open"
	hcFailedLog = "cannot open health-check node port"
)

// testHealthHandover: a cloud load balancer's probes see no refusal
// across a zero-downtime restart. Kproxy A serves an
// externalTrafficPolicy: Local service's health-check node port and
// /healthz on 10256; B is started beside it and A is sent SIGTERM, while
// a prober on the client asks both, over the node's address, at a steady
// rate with a new connection per probe (as load balancers do). Every
// probe must be answered 200 with kube-proxy's body, before, during and
// after the hand-over, until well after A has exited.
func testHealthHandover(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.writeLocalManifest(t, "node")
	// Two admin addresses, since the overlapping processes' admin APIs
	// cannot share one (10261 is the live view's, which they share).
	addrs := []string{"127.0.0.1:10260", "127.0.0.1:10262"}
	e.adminAt = addrs[0]
	a := e.start(t)
	e.waitLocalReady(t, a)
	waitLogged(t, a, hcOpenLog)

	node := netnstest.NodeIP4.String()
	probes := startHealthProbes(e.tp.Client, []healthProbe{
		{name: "health-check node port", url: fmt.Sprintf("http://%s:%d/", node, localSvcHCPort), check: checkHCBody},
		{name: "/healthz", url: fmt.Sprintf("http://%s:10256/healthz", node)},
	})
	defer probes.stop()
	probes.waitProgress(t, 10)

	e.adminAt = addrs[1]
	b := e.start(t)
	e.waitLocalReady(t, b)
	// B has tried its health-check node port (opened it, or failed to).
	waitLoggedAny(t, b, hcOpenLog, hcFailedLog)
	probes.waitProgress(t, 10)

	signalled := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("kproxy A did not exit within 20 s of SIGTERM")
	}
	t.Logf("A exited %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	// Long enough after A's exit for a retry of a failed open (5 s, as
	// kube-proxy's health server) to have shown; 100 probes each at 20 ms.
	probes.waitProgress(t, 100)
	probes.stop()
	for _, p := range probes.probes {
		ok, failed := p.ok.Load(), p.failed.Load()
		t.Logf("%s: %d probes answered, %d failed", p.name, ok, failed)
		if failed > 0 {
			at := time.Unix(0, p.firstAt.Load()).Sub(signalled).Round(time.Millisecond)
			t.Errorf("%s: %d of %d probes failed across the hand-over (first, %v after SIGTERM to A: %v), want 0", p.name, failed, ok+failed, at, p.firstErr.Load())
		}
	}
	if t.Failed() {
		t.Logf("end of B's log:\n%s", binarytest.Tail(b.Log, 30))
	}
}

// testHealthPortRetry: a health-check node port that cannot be opened at
// first (a socket outside kproxy holds the port) opens by itself once the
// port is free, without any change to its service.
func testHealthPortRetry(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.writeLocalManifest(t, "node")
	squatter := e.tp.Node.Listen(t, "tcp", fmt.Sprintf(":%d", localSvcHCPort))
	p := e.start(t)
	e.waitLocalReady(t, p)
	waitLogged(t, p, hcFailedLog)
	squatter.Close()
	freed := time.Now()
	e.waitHCNodePort(t, 200, 2)
	t.Logf("health-check node port served %v after the port was freed", time.Since(freed).Round(time.Millisecond))
}

// waitLocalReady waits until kproxy p serves e2e/local with both endpoints.
func (e *env) waitLocalReady(t *testing.T, p *proc) {
	t.Helper()
	e.waitState(t, p, spLocal+" ready", func(st map[string]spState) bool {
		s, ok := st[spLocal]
		return ok && len(s.Endpoints) == 2 && len(s.ListenAddresses) > 0
	})
}

// checkHCBody wants kube-proxy's body of a healthy e2e/local with its
// two local endpoints.
func checkHCBody(code int, body string) error {
	if code != http.StatusOK || !strings.Contains(body, `"localEndpoints": 2`) ||
		!strings.Contains(body, `"namespace": "e2e"`) || !strings.Contains(body, `"serviceProxyHealthy": true`) {
		return fmt.Errorf("answered %d %q, want 200 with 2 local endpoints", code, body)
	}
	return nil
}

// healthProbe asks one URL again and again.
type healthProbe struct {
	name, url  string
	check      func(code int, body string) error // nil: 200 wanted
	ok, failed atomic.Int64
	firstErr   atomic.Value
	firstAt    atomic.Int64 // when the first failure was, in Unix nanoseconds
}

// healthProbes are probes at a steady rate, each its own goroutine.
type healthProbes struct {
	probes   []*healthProbe
	stopping chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

// probeInterval is a steady rate (50 probes a second per URL); a probe
// loop ends by itself after 3,000 probes or 90 s.
const probeInterval = 20 * time.Millisecond

func startHealthProbes(ns *netnstest.Netns, probes []healthProbe) *healthProbes {
	hp := &healthProbes{stopping: make(chan struct{})}
	client := ns.HTTPClient(2 * time.Second) // a new connection per probe
	limit := time.Now().Add(90 * time.Second)
	for i := range probes {
		p := &probes[i]
		hp.probes = append(hp.probes, p)
		hp.wg.Add(1)
		go func() {
			defer hp.wg.Done()
			tick := time.NewTicker(probeInterval)
			defer tick.Stop()
			for n := 0; n < 3000 && time.Now().Before(limit); n++ {
				select {
				case <-hp.stopping:
					return
				case <-tick.C:
				}
				if err := p.once(client); err != nil {
					p.failed.Add(1)
					if p.firstErr.CompareAndSwap(nil, fmt.Sprintf("%s (refused: %v)", err, errors.Is(err, syscall.ECONNREFUSED))) {
						p.firstAt.Store(time.Now().UnixNano())
					}
					continue
				}
				p.ok.Add(1)
			}
		}()
	}
	return hp
}

func (p *healthProbe) once(client *http.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return op
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if p.check != nil {
		return p.check(resp.StatusCode, string(raw))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %d %q, want 200", resp.StatusCode, raw)
	}
	return nil
}

// waitProgress waits until every probe has had n more answers or
// failures (its loop running, not its outcome).
func (hp *healthProbes) waitProgress(t *testing.T, n int64) {
	t.Helper()
	targets := make([]int64, len(hp.probes))
	for i, p := range hp.probes {
		targets[i] = p.ok.Load() + p.failed.Load() + n
	}
	deadline := time.Now().Add(time.Duration(n)*probeInterval + 30*time.Second)
	for i, p := range hp.probes {
		for p.ok.Load()+p.failed.Load() < targets[i] {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the prober made no progress", p.name)
			}
			time.Sleep(probeInterval) // counters, not events
		}
	}
}

func (hp *healthProbes) stop() {
	hp.once.Do(func() { close(hp.stopping) })
	hp.wg.Wait()
}

// waitLoggedAny waits until p's log holds one of msgs.
func waitLoggedAny(t *testing.T, p *proc, msgs ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(p.Log)
		for _, m := range msgs {
			if strings.Contains(string(b), m) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kproxy did not log any of %q within 15 s:\n%s", msgs, binarytest.Tail(p.Log, 20))
		}
		time.Sleep(20 * time.Millisecond) // a log file: nothing to await
	}
}
