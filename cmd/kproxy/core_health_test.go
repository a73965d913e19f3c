package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/kubetest"
)

// A core's /healthz follows what it serves (the real API server, the core
// a process): unhealthy, saying why, while its source has not synced (the
// API server is down when it starts), healthy once it has, unhealthy again
// once the API server has not answered for longer than
// --serve-api-outage-limit, and healthy when it answers again.
func TestCoreHealthzFollowsTheAPIServer(t *testing.T) {
	s := kubetest.Start(t)
	s.Stop(t)
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", freeTCPPort(t))
	startProc(t, "core", "watch", "--serve", coreAddr, "--source", "kube", "--kubeconfig", s.KproxyKubeconfig,
		"--serve-metrics-address", strings.TrimSuffix(strings.TrimPrefix(healthz, "http://"), "/healthz"),
		"--serve-api-outage-limit", "3s", "--log-level", "info", "--log-format", "json")

	waitHealthz(t, healthz, http.StatusServiceUnavailable, "has not synced")
	s.Restart(t)
	waitHealthz(t, healthz, http.StatusOK, "ok")
	stopping := time.Now()
	s.Stop(t)
	waitHealthz(t, healthz, http.StatusServiceUnavailable, "the API server has not answered")
	// Unhealthy after the limit, not before it.
	if d := time.Since(stopping); d < 3*time.Second {
		t.Errorf("unhealthy %v after the API server began to stop, before the 3 s limit", d.Round(time.Millisecond))
	}
	s.Restart(t)
	waitHealthz(t, healthz, http.StatusOK, "ok")
}

// waitHealthz polls url until it answers code with a body containing want.
func waitHealthz(t *testing.T, url string, code int, want string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %q", resp.StatusCode, body)
			if resp.StatusCode == code && strings.Contains(string(body), want) {
				t.Logf("/healthz: %s", last)
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond) // polling an HTTP endpoint for a state change
	}
	t.Fatalf("/healthz did not answer %d %q within 90 s; last: %s", code, want, last)
}
