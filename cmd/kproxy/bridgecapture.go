package main

import (
	"context"
	"net/netip"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules/bridgecapture"
	"github.com/kproxy/kproxy/portal/steer"
)

// captureBridges brings up the replies of pods to pods on the same bridge
// (portal/rules/bridgecapture) while ctx lasts, where pod clients are
// dialled from their own address: then a pod's endpoint on its own bridge
// sees the pod's address too. The first programming is done before it
// returns, before anything is served. Where it cannot be (no nft, no
// br_netfilter), such endpoints see the node's address, as before.
func captureBridges(ctx context.Context, pods *datapath.PodClients, log zerolog.Logger) {
	if pods == nil {
		return
	}
	err := bridgecapture.Start(ctx, steer.TransparentReplyMark, func(bs []bridgecapture.Bridge) {
		var prefixes []netip.Prefix
		for _, b := range bs {
			prefixes = append(prefixes, b.Prefixes...)
		}
		datapath.SetCapturedBridges(prefixes)
	}, log)
	if err != nil {
		log.Warn().Err(err).Msg("bridge capture unavailable: an endpoint on its client pod's bridge sees the node's address")
	}
}
