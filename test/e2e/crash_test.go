//go:build linux

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkCrash crashes the TCP and UDP portals of e2e/web through kproxy
// chaos while a client loop runs across the crashes: no request fails, and
// the proxy ports and listen addresses stay.
func (e *env) checkCrash(t *testing.T) {
	before, err := e.state()
	if err != nil {
		t.Fatal(err)
	}
	var ok, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	stop, done := make(chan struct{}), make(chan struct{})
	var stopOnce sync.Once
	stopLoop := func() {
		stopOnce.Do(func() { close(stop) })
		<-done
	}
	defer stopLoop()
	go func() {
		defer close(done)
		limit := time.Now().Add(20 * time.Second)
		for i := 0; i < 5000 && time.Now().Before(limit); i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, proto := range []string{"tcp", "udp"} {
				if _, err := e.askBackend(e.tp.Client, proto, svcAddr(webCluster4, webPort(proto)), 2*time.Second); err != nil {
					failed.Add(1)
					errMu.Lock()
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("%s at %s: %v", proto, time.Now().Format("15:04:05.000"), err))
					}
					errMu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}
	}()
	waitCount := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; ok.Load()+failed.Load() < n; i++ {
			select {
			case <-done:
				t.Fatalf("client loop ended before %s (%d ok, %d failed)", what, ok.Load(), failed.Load())
			default:
			}
			if time.Now().After(deadline) || i > 1000 {
				t.Fatalf("client loop: %d requests before %s after 10s, want %d", ok.Load()+failed.Load(), what, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount("the crash", 20)
	for _, sp := range []string{spWebTCP, spWebUDP} {
		out, err := e.tp.Node.Run(e.bin, "chaos", "--admin-address", e.adminAddr(), "--admin-token-file", e.tokenFile, "crash", sp, "portal")
		if err != nil {
			t.Fatalf("kproxy chaos crash %s portal: %v", sp, err)
		}
		t.Logf("kproxy chaos crash %s portal: %s", sp, strings.TrimSpace(out))
	}
	after := e.waitState(t, nil, "portal restarts", func(st map[string]spState) bool {
		return st[spWebTCP].Restarts > before[spWebTCP].Restarts && st[spWebUDP].Restarts > before[spWebUDP].Restarts
	})
	n := ok.Load() + failed.Load()
	waitCount("the end", n+20)
	stopLoop()
	for _, sp := range []string{spWebTCP, spWebUDP} {
		b, a := before[sp], after[sp]
		t.Logf("%s: proxy port %d -> %d, listen %v -> %v, restarts %d -> %d", sp, b.ProxyPort, a.ProxyPort, b.ListenAddresses, a.ListenAddresses, b.Restarts, a.Restarts)
		if a.ProxyPort != b.ProxyPort || !slices.Equal(a.ListenAddresses, b.ListenAddresses) {
			t.Errorf("%s: the portal crash changed proxy port %d -> %d, listen addresses %v -> %v", sp, b.ProxyPort, a.ProxyPort, b.ListenAddresses, a.ListenAddresses)
		}
	}
	t.Logf("client loop across the crashes: %d ok, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d requests failed across the portal crashes: %v", failed.Load(), errs)
	}
}
