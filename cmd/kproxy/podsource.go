package main

import (
	"net/netip"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
)

// podClients are the clients dialled from their own address whatever the
// service (--preserve-pod-source-ip): the pods of this node, told by the
// prefixes the rules use for pods' traffic. Only in the kernel modes,
// whose rules bring the replies back, and only where the pods are known.
func podClients(o runOptions, pods []netip.Prefix, log zerolog.Logger) *datapath.PodClients {
	switch {
	case !o.preservePodSourceIP || !datapath.Transparent(o.portalMode):
		return nil
	case len(pods) == 0:
		log.Info().Msg("--preserve-pod-source-ip: no --cluster-cidr (nor the Node's pod CIDRs) tells pods apart: endpoints see the node's address")
		return nil
	}
	log.Info().Interface("pods", pods).Msg("endpoints see the address of this node's pod clients")
	return datapath.NewPodClients(pods)
}
