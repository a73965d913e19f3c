// Package bridgecapture brings up to this node's IP stack the replies to
// kproxy's connections that a bridge would otherwise switch straight to a
// pod.
//
// A connection kproxy dials from a pod client's address (transparent
// dialling, --preserve-pod-source-ip) to an endpoint on the same bridge
// (a pod of the same node, behind a CNI bridge such as cni0) is answered
// over the bridge: the endpoint's reply is addressed to the client pod,
// whose port on the bridge takes it without the node's IP stack seeing
// it, so the transparent rules never hand it to kproxy's socket. With
// br_netfilter (net.bridge.bridge-nf-call-iptables=1, which Kubernetes
// networking needs anyway) a bridged packet passes the IP prerouting
// hooks, where the transparent rules mark such a reply; a bridge-family
// chain after br_netfilter's (priority 1, br_netfilter's is 0) then
// readdresses the marked frame to the bridge's own MAC as a packet for
// this host, and the bridge delivers it up, where the mark's policy route
// takes it to kproxy's socket. A rule per bridge prefix: this kernel's
// nft has no expression for the bridge's own address.
package bridgecapture

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
)

// Table is the bridge-family table's name.
const Table = "kproxy"

// chain runs after br_netfilter's prerouting hook (NF_BR_PRI_BRNF, 0),
// which runs the IP hooks that set the reply mark.
const (
	chain    = "capture"
	priority = "1"
)

// Bridge is a bridge of this node whose pods' replies are brought up: its
// name, its own MAC, and the prefixes of its addresses (the pods on it).
type Bridge struct {
	Name     string
	MAC      net.HardwareAddr
	Prefixes []netip.Prefix
}

// Equal reports whether b and o program the same rules.
func (b Bridge) Equal(o Bridge) bool {
	return b.Name == o.Name && bytes.Equal(b.MAC, o.MAC) && slices.Equal(b.Prefixes, o.Prefixes)
}
