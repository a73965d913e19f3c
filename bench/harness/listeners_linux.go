//go:build linux

package harness

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"time"
)

// watchListeners reports, per address, when a listening socket on it
// first appeared in /proc/net/tcp (measured from start): the time a port
// listens, seen without connecting to it, so the proxy is not disturbed.
// It scans until every address listens or ctx ends; wait returns the times
// (zero for addresses never seen).
func watchListeners(ctx context.Context, addrs []string, start time.Time) (wait func() []time.Duration, err error) {
	keys := make(map[string]int, len(addrs))
	for i, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("watch listeners: %q is not IPv4 address:port", a)
		}
		// /proc/net/tcp prints the address as the in-memory __be32 in hex
		// (so reversed on little-endian hosts) and the port in hex.
		ip := ap.Addr().As4()
		keys[fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), ap.Port())] = i
	}
	seen := make([]time.Duration, len(addrs))
	done := make(chan struct{})
	go func() {
		defer close(done)
		left := len(addrs)
		t := time.NewTicker(listenScanInterval)
		defer t.Stop()
		for left > 0 {
			raw, err := os.ReadFile("/proc/net/tcp")
			now := time.Since(start)
			if err != nil {
				return
			}
			for _, line := range bytes.Split(raw, []byte{'\n'}) {
				f := bytes.Fields(line)
				if len(f) < 4 || string(f[3]) != "0A" { // 0A: LISTEN
					continue
				}
				if i, ok := keys[string(f[1])]; ok && seen[i] == 0 {
					seen[i] = now
					left--
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() []time.Duration { <-done; return seen }, nil
}
