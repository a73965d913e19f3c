package datapath

import (
	"net/netip"
	"slices"
)

// PodClients are the clients that are pods of this node: within the
// pods' prefixes (kube-proxy's cluster CIDR, or this node's pod CIDRs)
// and on a link of this node (the route to them has no gateway). A pod's
// address routes to its own node, so an endpoint anywhere in the cluster
// answers a connection dialled from it through this node's stack, where
// the transparent rules take the reply to kproxy's socket: such a client
// is dialled from its own address, as kube-proxy's DNAT keeps it.
type PodClients struct {
	prefixes []netip.Prefix
	link     func(netip.Addr) (endpointLink, bool) // addrLinks.get; tests replace it
}

// NewPodClients returns the pod clients within prefixes (nil for none).
func NewPodClients(prefixes []netip.Prefix) *PodClients {
	if len(prefixes) == 0 {
		return nil
	}
	return &PodClients{prefixes: prefixes, link: addrLinks.get}
}

// onNode reports whether client is a pod of this node (false for nil).
func (pc *PodClients) onNode(client netip.Addr) bool {
	if pc == nil || !slices.ContainsFunc(pc.prefixes, func(p netip.Prefix) bool { return p.Contains(client) }) {
		return false
	}
	l, ok := pc.link(client)
	return ok && !l.node && !l.gateway
}
