package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRemoteCoreKilledUnderLoad: two node proxies serve a service from a
// core under a connection-per-request load; the core is killed (-9): the
// nodes notice, keep serving what they have (0 failed connections), a
// change made while the core is down is served within seconds of its
// return, and the restarted core gets both subscriptions back.
func TestRemoteCoreKilledUnderLoad(t *testing.T) {
	port := backendsOn(t, "127.0.0.11", "127.0.0.12", "127.0.0.13")
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port,
		[][2]string{{"127.0.0.11", "node-a"}, {"127.0.0.12", "node-b"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	pa, pb := freeTCPPort(t), freeTCPPort(t)
	a := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa)...)
	b := startProc(t, "node-b", nodeArgs(coreAddr, "node-b", pb)...)
	addrA, addrB := nodeAddr(pa), nodeAddr(pb)
	a.waitLog(t, "source synced", 1, 30*time.Second)
	b.waitLog(t, "source synced", 1, 30*time.Second)
	awaitNames(t, addrA, 1, "127.0.0.11")
	awaitNames(t, addrB, 1, "127.0.0.12")

	load := startConnLoad(t, 4, 2*time.Minute, addrA, addrB)
	core.kill()
	killed := time.Now()
	a.waitLog(t, "lost the core", 1, 30*time.Second)
	b.waitLog(t, "lost the core", 1, 30*time.Second)
	t.Logf("nodes noticed the core's loss after %v", time.Since(killed).Round(time.Millisecond))

	// While the core is down: node-a's endpoint moves to 127.0.0.13.
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port,
		[][2]string{{"127.0.0.13", "node-a"}, {"127.0.0.12", "node-b"}}))
	okDown := load.ok.Load()
	// Still serving the last state while the core is away.
	if got := namesThrough(t, addrA, 5); got["127.0.0.11"] != 5 {
		t.Fatalf("node-a without its core served %v, want its last state (127.0.0.11)", got)
	}

	core2 := startProc(t, "core-restarted", coreArgs(coreAddr, manifest)...)
	core2.waitLog(t, "core serving", 1, 30*time.Second)
	back := time.Now()
	a.waitLog(t, "snapshot from the core applied", 2, 30*time.Second)
	b.waitLog(t, "snapshot from the core applied", 2, 30*time.Second)
	resync := time.Since(back)
	awaitNames(t, addrA, 5, "127.0.0.13")
	applied := time.Since(back)
	core2.waitLog(t, "backend subscribed", 2, 10*time.Second)
	for _, node := range []string{`"node":"node-a"`, `"node":"node-b"`} {
		if !strings.Contains(core2.logs.String(), node) {
			t.Fatalf("restarted core: no subscription with %s", node)
		}
	}
	load.stop()
	t.Logf("core down for %v; both nodes resynced %v after its return, the change served after %v; load: %d ok (%d after the change), %d failed",
		back.Sub(killed).Round(time.Millisecond), resync.Round(time.Millisecond), applied.Round(time.Millisecond), load.ok.Load(), load.ok.Load()-okDown, load.failed.Load())
	if f := load.failed.Load(); f != 0 {
		t.Fatalf("%d connections failed (first: %v)", f, load.errs)
	}
	if load.ok.Load() < 100 {
		t.Fatalf("only %d requests: the load did not run", load.ok.Load())
	}
	if applied > 10*time.Second {
		t.Fatalf("a change made while the core was down took %v after its return", applied)
	}
}

// TestRemoteNodeStartsBeforeCore: a node proxy started before its core
// waits for it (nothing programmed) and serves once the core is up.
func TestRemoteNodeStartsBeforeCore(t *testing.T) {
	port := backendsOn(t, "127.0.0.11")
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port, [][2]string{{"127.0.0.11", "node-a"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	pa := freeTCPPort(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	a := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa, "--metrics-bind-address", metricsAddr)...)
	a.waitLog(t, "core not reachable yet", 1, 30*time.Second)
	if strings.Contains(a.logs.String(), "source synced") {
		t.Fatal("the node synced without a core")
	}
	core := startProc(t, "core", coreArgs(coreAddr, manifest)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	up := time.Now()
	a.waitLog(t, "source synced", 1, 30*time.Second)
	awaitNames(t, nodeAddr(pa), 5, "127.0.0.11")
	t.Logf("the node served %v after the core came up", time.Since(up).Round(time.Millisecond))

	// Its link to the core in /metrics.
	a.waitLog(t, "serving metrics (/metrics)", 1, 10*time.Second)
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"kproxy_remote_core_connected 1\n", "kproxy_remote_snapshots_total 1\n", "kproxy_remote_delivery_duration_seconds_count 1\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
