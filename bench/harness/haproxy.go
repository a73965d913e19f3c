package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeHAProxyConfig writes HAProxy's equivalent of n TCP service ports:
// one listen section per port (and per bulk port, to the sinks) (its own frontend and round-robin backend,
// as kproxy has a balancer per service port), tcp mode, 2 threads.
func writeHAProxyConfig(dir string, n int, b *Backends, bulk bool) (string, error) {
	var c strings.Builder
	// maxconn bounds HAProxy's fd needs (2 per connection plus the
	// listeners) within the harness's fd limit.
	fmt.Fprintf(&c, "global\n  nbthread 2\n  maxconn 4096\n\ndefaults\n  mode tcp\n  balance roundrobin\n"+
		"  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n\n")
	for i := range n {
		fmt.Fprintf(&c, "listen %s\n  bind %s:%d\n", serviceName(i), hostIP(haproxyNet, i), tcpServicePort)
		for k, ip := range b.IPs {
			fmt.Fprintf(&c, "  server e%d %s:%d\n", k, ip, b.TCPPort)
		}
		if bulk {
			fmt.Fprintf(&c, "listen %s-bulk\n  bind %s:%d\n", serviceName(i), hostIP(haproxyNet, i), bulkServicePort)
			for k, ip := range b.IPs {
				fmt.Fprintf(&c, "  server e%d %s:%d\n", k, ip, b.SinkPort)
			}
		}
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(c.String()), 0o644); err != nil {
		return "", fmt.Errorf("haproxy config: %w", err)
	}
	return path, nil
}

// startHAProxy runs HAProxy in the foreground (-db) on that config.
func startHAProxy(bin, dir string, n int, b *Backends, bulk bool) (*Proc, error) {
	cfg, err := writeHAProxyConfig(dir, n, b, bulk)
	if err != nil {
		return nil, err
	}
	return startProc("haproxy", filepath.Join(dir, "haproxy.log"), []string{bin, "-db", "-f", cfg}, nil)
}
