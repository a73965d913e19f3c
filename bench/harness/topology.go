package harness

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// Address plan: each party in its own /16 of 127.0.0.0/8, so kproxy, the
// baseline kproxy, HAProxy and the backends never contend for an address.
const (
	backendNet  = 1 // 127.1.0.0/16: backends
	kproxyNet   = 2 // 127.2.0.0/16: kproxy's service IPs
	haproxyNet  = 3 // 127.3.0.0/16: HAProxy's frontends
	relayNet    = 4 // 127.4.0.0/16: the bare UDP relay's addresses
	baselineNet = 5 // 127.5.0.0/16: the baseline kproxy's service IPs
	tunedNet    = 6 // 127.6.0.0/16: the tuned HAProxy's frontends
	nginxNet    = 7 // 127.7.0.0/16: nginx's UDP frontends
	kernelNet   = 8 // 127.8.0.0/16: the kernel's DNAT rules' service addresses

	tcpServicePort   = 8080
	udpServicePort   = 8053
	bulkServicePort  = 8081 // to the sinks
	closeServicePort = 8082 // to the HTTP servers (close)

	// maxPorts is how many addresses one /16 gives (no .0.0, no broadcast).
	maxPorts = 65534
)

// hostIP is the i-th address (from 0) of 127.NET.0.0/16, NET moved up by
// eight /16s per slot of $KPROXY_BENCH_NET_OFFSET: sessions benchmarking on
// one machine at once each take a slot, so each has its own eight /16s
// (kproxy's and HAProxy's sockets share ports with SO_REUSEPORT, so two
// harnesses on overlapping plans would serve each other's clients).
func hostIP(net byte, i int) string {
	n := i + 1
	return fmt.Sprintf("127.%d.%d.%d", int(net)+netOffset, n>>8, n&0xff)
}

// netsPerPlan is how many /16s one harness takes (backendNet..kernelNet).
const netsPerPlan = kernelNet

var netOffset = planOffset(os.Getenv("KPROXY_BENCH_NET_OFFSET"))

// planOffset is how far slot s moves the /16s: 0 for no slot or one out
// of range.
func planOffset(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || kernelNet+netsPerPlan*n > 255 {
		return 0
	}
	return netsPerPlan * n
}

// servicePort is the port a load mode uses.
func servicePort(mode string) int {
	switch mode {
	case ModeUDP:
		return udpServicePort
	case ModeBulk:
		return bulkServicePort
	case ModeClose:
		return closeServicePort
	}
	return tcpServicePort
}

// serviceAddrs are the n service addresses of one party for a load mode.
func serviceAddrs(net byte, n int, mode string) []string {
	port := servicePort(mode)
	out := make([]string, n)
	for i := range out {
		out[i] = hostIP(net, i) + ":" + strconv.Itoa(port)
	}
	return out
}

// serviceName is the i-th service's name; index parses it back.
func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func serviceIndex(name string) (int, bool) {
	var i int
	if _, err := fmt.Sscanf(name, "svc-%05d", &i); err != nil {
		return 0, false
	}
	return i, true
}

// directAddrs are what a client connects to without a proxy: service
// port i's share of the backends, round-robin, as a proxy would spread it.
func directAddrs(b *Backends, n int, mode string) []string {
	port := map[string]int{ModeUDP: b.UDPPort, ModeBulk: b.SinkPort, ModeClose: b.HTTPPort}[mode]
	if port == 0 {
		port = b.TCPPort
	}
	out := make([]string, n)
	for i := range out {
		out[i] = net.JoinHostPort(b.IPs[i%len(b.IPs)], strconv.Itoa(port))
	}
	return out
}
