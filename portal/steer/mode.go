package steer

// Portal modes: how service traffic reaches the listeners. The mode decides
// what a service port listens on (datapath.ListenSpecs) and which rules, if
// any, steer traffic to it (portal/rules and its subpackages, one per mode).
const (
	// ModeBind listens directly on every service IP:port (cluster, external
	// and load-balancer IPs) and on bind-address:nodePort: winuserspace's
	// model, which needs no kernel rules and works on loopback addresses
	// without root.
	ModeBind = "bind"
	// ModeNftables and ModeIPTables: kernel rules redirect service traffic
	// to each service port's proxy-port listener.
	ModeNftables = "nftables"
	ModeIPTables = "iptables"
	// ModeNetsh: the service IPs are added to an interface and the listeners
	// bind them directly, as in ModeBind (winuserspace).
	ModeNetsh = "netsh"
)

// KernelMode reports whether mode redirects to proxy ports with kernel rules.
func KernelMode(mode string) bool { return mode == ModeNftables || mode == ModeIPTables }
