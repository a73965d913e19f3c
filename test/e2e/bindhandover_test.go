//go:build linux

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
)

const (
	bindSvc     = "127.0.42.1:18080"
	bindReadyOn = `"message":"service port listening"`
)

// The bind portal across kproxy restarts, on loopback with the real
// binary: 10 overlapping restarts (the next process started beside the
// old one, both listening on the service address through SO_REUSEPORT,
// then the old one sent SIGTERM) under connection-per-request and
// keep-alive load lose no request, and the keep-alive connections opened
// before the first restart work through all of them. Then the gap in
// service of a stop-then-start, after SIGTERM and after kill -9, is
// measured.
func TestBindHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("11 kproxy processes")
	}
	bin := binarytest.Build(t)
	dir := t.TempDir()
	for _, a := range []string{"127.0.42.11:8080", "127.0.42.12:8080"} {
		b, err := backends.StartTCP("backend-"+a, a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
	}
	manifest := filepath.Join(dir, "web.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: handover}
spec:
  clusterIP: 127.0.42.1
  ports: [{name: p, protocol: TCP, port: 18080, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web, namespace: handover, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: p, protocol: TCP, port: 8080}]
endpoints:
- {addresses: [127.0.42.11], conditions: {ready: true}}
- {addresses: [127.0.42.12], conditions: {ready: true}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	start := func() *proc {
		n++
		p := startBindProc(t, bin, filepath.Join(dir, fmt.Sprintf("kproxy-%d.log", n)), manifest)
		waitLogged(t, p, bindReadyOn)
		return p
	}

	old := start()
	var d net.Dialer
	ask := func() error { return tcpOK(bindSvc) }
	load := startHandoverLoad(t, d.DialContext, bindSvc, ask, 4, 4)
	var draining []*proc
	for i := 1; i <= 10; i++ {
		next := start()
		load.waitProgress(t)
		if err := old.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		draining = append(draining, old)
		// It stops accepting and drains what it holds (the keep-alive
		// connections, if it is the first).
		waitLogged(t, old, "shutting down")
		load.waitProgress(t)
		old = next
	}
	endOverlappingRestarts(t, "bind portal", load, draining)

	// Stop then start: nothing listens in between, so clients are refused
	// until the next process listens. The gap is measured from the signal.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		signalled := time.Now()
		old.stop(t, sig)
		old = start()
		gap := serviceGap(t, signalled, sig, ask)
		t.Logf("bind portal, %v then start: service back %v after the signal", sig, gap.Round(time.Millisecond))
	}
}

// startBindProc runs kproxy with the bind portal on loopback, logging JSON
// to logPath; cleanup kills it if it still runs.
func startBindProc(t *testing.T, bin, logPath, manifest string) *proc {
	t.Helper()
	// A grace period longer than the test: every old process keeps its
	// keep-alive connections until the clients close them.
	return startProc(t, exec.Command(bin, "run", "--portal", "bind", "--bind-address", "127.0.0.1", "--source", "file:"+manifest,
		"--healthz-bind-address", "", "--metrics-bind-address", "", "--log-format", "json",
		"--proxy-ports-file", "", "--shutdown-grace-period", "60s"), logPath)
}
