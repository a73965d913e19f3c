package main

import (
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
)

// nodeIPs are the node's own addresses, which a load-balancer IP's source
// ranges must admit for the IP itself to be admitted as a source
// (rules.Options.NodeIPs): --bind-address when it names one (kube-proxy
// takes it as the node's IP too), else the local addresses
// --nodeport-addresses selects (every one when unset), loopback and
// link-local ones aside, as found at start.
func nodeIPs(bindAddress string, nodePortPrefixes []netip.Prefix, log zerolog.Logger) []netip.Addr {
	if ip, err := netip.ParseAddr(bindAddress); err == nil && !ip.IsUnspecified() {
		return []netip.Addr{ip.Unmap()}
	}
	ips, err := localAddresses(nodePortPrefixes, false)
	if err != nil {
		log.Warn().Err(err).Msg("cannot list the node's addresses: load-balancer IPs are not admitted as their own source")
	}
	return ips
}

// proxyPortSpan is where proxy ports come from: --port-range, else the
// kernel's ephemeral range (net.ipv4.ip_local_port_range, which IPv6
// shares); 0, 0 (any port) when neither is known.
func proxyPortSpan(r datapath.PortRange) (first, last int) {
	if r.Size > 0 {
		return r.Base, r.Base + r.Size - 1
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err1 := strconv.Atoi(f[0])
	last, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return first, last
}
