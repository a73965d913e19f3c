package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// haproxyPeer is one HAProxy the harness runs: as kproxy-bench has always
// configured it, or tuned as HAProxy's documentation advises for a TCP
// forwarder, each on its own addresses.
type haproxyPeer struct {
	name  string // the target
	net   byte   // its frontends' /16
	tuned bool
	// minimal: a frontend per port, one backend for all (startup only).
	minimal bool
}

var (
	haproxyPlain   = haproxyPeer{name: TargetHAProxy, net: haproxyNet}
	haproxyTuned   = haproxyPeer{name: TargetHAProxyTuned, net: tunedNet, tuned: true}
	haproxyMinimal = haproxyPeer{name: TargetHAProxyMinimal, net: haproxyNet, minimal: true}
)

// haproxyPeers are the HAProxies o compares kproxy with.
func (o *Options) haproxyPeers() []haproxyPeer {
	var out []haproxyPeer
	for _, p := range []haproxyPeer{haproxyPlain, haproxyTuned, haproxyMinimal} {
		if o.compares(p.name) {
			out = append(out, p)
		}
	}
	return out
}

// tuning is what HAProxy's configuration manual advises for a TCP
// forwarder: splice(2) where it pays (splice-auto), no wake-up for an
// accepted connection before its first data (tcp-smart-accept), and the
// first data sent with the handshake's last ACK (tcp-smart-connect).
const tuning = "  option splice-auto\n  option tcp-smart-accept\n  option tcp-smart-connect\n"

// writeHAProxyConfig writes HAProxy's equivalent of n TCP service ports
// and their bulk and close ports when modes have them, tcp mode, 2
// threads: listen sections, or (minimal) frontends sharing a backend.
func writeHAProxyConfig(dir string, peer haproxyPeer, n int, b *Backends, modes []string) (string, error) {
	var c strings.Builder
	// maxconn bounds HAProxy's fd needs (2 per connection plus the
	// listeners) within the harness's fd limit.
	fmt.Fprintf(&c, "global\n  nbthread 2\n  maxconn 4096\n\ndefaults\n  mode tcp\n  balance roundrobin\n"+
		"  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n")
	if peer.tuned {
		c.WriteString(tuning)
	}
	c.WriteString("\n")
	if peer.minimal {
		writeMinimalHAProxy(&c, peer, n, b, slices.Contains(modes, ModeClose))
	} else {
		writeListenSections(&c, peer, n, b, slices.Contains(modes, ModeBulk), slices.Contains(modes, ModeClose))
	}
	path := filepath.Join(dir, peer.name+".cfg")
	if err := os.WriteFile(path, []byte(c.String()), 0o644); err != nil {
		return "", fmt.Errorf("%s config: %w", peer.name, err)
	}
	return path, nil
}

// writeListenSections is a listen section per port (and per bulk port,
// to the sinks, and per close port, to the HTTP servers): its own
// frontend and round-robin backend, as kproxy has a balancer per service
// port.
func writeListenSections(c *strings.Builder, peer haproxyPeer, n int, b *Backends, bulk, close bool) {
	for i := range n {
		fmt.Fprintf(c, "listen %s\n  bind %s:%d\n", serviceName(i), hostIP(peer.net, i), tcpServicePort)
		for k, ip := range b.IPs {
			fmt.Fprintf(c, "  server e%d %s:%d\n", k, ip, b.TCPPort)
		}
		if bulk {
			fmt.Fprintf(c, "listen %s-bulk\n  bind %s:%d\n", serviceName(i), hostIP(peer.net, i), bulkServicePort)
			for k, ip := range b.IPs {
				fmt.Fprintf(c, "  server e%d %s:%d\n", k, ip, b.SinkPort)
			}
		}
		if close {
			fmt.Fprintf(c, "listen %s-close\n  bind %s:%d\n", serviceName(i), hostIP(peer.net, i), closeServicePort)
			for k, ip := range b.IPs {
				fmt.Fprintf(c, "  server e%d %s:%d\n", k, ip, b.HTTPPort)
			}
		}
	}
}

// writeMinimalHAProxy is the least configuration that serves n ports: a
// frontend each, all sharing one round-robin backend (what a user
// minimising HAProxy's start would write); with close, a frontend per
// close port too, sharing a backend of the HTTP servers.
func writeMinimalHAProxy(c *strings.Builder, peer haproxyPeer, n int, b *Backends, close bool) {
	for i := range n {
		fmt.Fprintf(c, "frontend %s\n  bind %s:%d\n  default_backend endpoints\n", serviceName(i), hostIP(peer.net, i), tcpServicePort)
		if close {
			fmt.Fprintf(c, "frontend %s-close\n  bind %s:%d\n  default_backend http-endpoints\n", serviceName(i), hostIP(peer.net, i), closeServicePort)
		}
	}
	c.WriteString("backend endpoints\n")
	for k, ip := range b.IPs {
		fmt.Fprintf(c, "  server e%d %s:%d\n", k, ip, b.TCPPort)
	}
	if close {
		c.WriteString("backend http-endpoints\n")
		for k, ip := range b.IPs {
			fmt.Fprintf(c, "  server e%d %s:%d\n", k, ip, b.HTTPPort)
		}
	}
}

// startHAProxy runs HAProxy in the foreground (-db) on that config.
func startHAProxy(bin, dir string, peer haproxyPeer, n int, b *Backends, modes []string) (*Proc, error) {
	cfg, err := writeHAProxyConfig(dir, peer, n, b, modes)
	if err != nil {
		return nil, err
	}
	return startProc(peer.name, filepath.Join(dir, peer.name+".log"), []string{bin, "-db", "-f", cfg}, nil)
}
