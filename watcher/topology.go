package watcher

import (
	"slices"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"

	"github.com/kproxy/kproxy/messages"
)

// Endpoint selection follows kube-proxy's CategorizeEndpoints
// (pkg/proxy/topology.go) rule for rule; docs/topology.md lists the cases,
// and testdata/topology-cases.yaml runs kube-proxy's own.

// Topology modes, as kube-proxy names them (the trafficDistribution values).
const (
	topologyNone     = ""
	topologySameNode = corev1.ServiceTrafficDistributionPreferSameNode
	topologySameZone = corev1.ServiceTrafficDistributionPreferSameZone
)

// scopePolicy is what decides a service port's two endpoint scopes.
type scopePolicy struct {
	internalLocal, externalLocal bool
	// externallyAccessible: a node port, an external IP or a load-balancer
	// IP. Without one no traffic uses the external scope, and its policy is
	// ignored (kube-proxy's ExternallyAccessible).
	externallyAccessible bool
}

// usesCluster and usesLocal: which kinds of endpoints some scope needs.
// An externally accessible service needs the cluster's endpoints even under
// externalTrafficPolicy Local: external traffic from the node itself or a
// pod is short-circuited to them (kube-proxy's UsesClusterEndpoints).
func (p scopePolicy) usesCluster() bool {
	return !p.internalLocal || p.externallyAccessible
}
func (p scopePolicy) usesLocal() bool {
	return p.internalLocal || (p.externallyAccessible && p.externalLocal)
}

// selectEndpoints decides which endpoints this node uses for each traffic
// scope and returns those usable by at least one, with their Internal and
// External flags set. Cluster IP traffic is the internal scope; external
// IPs, load-balancer IPs and node ports the external one. A scope under a
// Local policy uses the local endpoints, otherwise the cluster endpoints.
//
// Cluster endpoints are the ready endpoints the topology mode allows
// (node hints for this node, else zone hints for its zone, else all), or,
// when none is ready anywhere, every serving terminating endpoint. Local
// endpoints are the ready local ones, or else the serving terminating local
// ones; topology never narrows them.
//
// The cluster endpoints are kept (Cluster set) even where no scope uses
// them: external traffic from inside the cluster is short-circuited to
// them, and a service that has some drops, rather than rejects, traffic its
// Local policy leaves without endpoints (kube-proxy's hasAnyEndpoints).
func selectEndpoints(candidates []*messages.Endpoint, p scopePolicy, node, zone string, log topologyLog) []*messages.Endpoint {
	var local map[*messages.Endpoint]bool
	if !p.usesCluster() {
		log = topologyLog{} // kube-proxy says nothing of hints it does not use
	}
	mode := topologyMode(candidates, node, zone, log)
	cluster := pick(candidates, func(ep *messages.Endpoint) bool {
		return ep.GetReady() && availableForTopology(ep, mode, node, zone)
	})
	// The mode needs a ready endpoint for this node or zone, so an empty
	// set here means none is ready anywhere.
	if len(cluster) == 0 {
		cluster = pick(candidates, servingTerminating)
	}
	if p.usesLocal() {
		local = pick(candidates, func(ep *messages.Endpoint) bool { return ep.GetLocal() && ep.GetReady() })
		if len(local) == 0 {
			local = pick(candidates, func(ep *messages.Endpoint) bool { return ep.GetLocal() && servingTerminating(ep) })
		}
	}
	internal, external := cluster, cluster
	if p.internalLocal {
		internal = local
	}
	if p.externalLocal {
		external = local
	}
	if !p.externallyAccessible {
		// No traffic uses the external scope; mirroring the internal one
		// lists exactly the endpoints cluster-IP traffic uses.
		external = internal
	}
	var out []*messages.Endpoint
	for _, ep := range candidates {
		ep.Internal = internal[ep]
		ep.External = external[ep]
		ep.Cluster = cluster[ep]
		if ep.Internal || ep.External || ep.Cluster {
			out = append(out, ep)
		}
	}
	return out
}

func servingTerminating(ep *messages.Endpoint) bool { return ep.GetServing() && ep.GetTerminating() }

func pick(candidates []*messages.Endpoint, keep func(*messages.Endpoint) bool) map[*messages.Endpoint]bool {
	set := make(map[*messages.Endpoint]bool)
	for _, ep := range candidates {
		if keep(ep) {
			set[ep] = true
		}
	}
	return set
}

// topologyMode is kube-proxy's topologyModeFromHints: PreferSameNode when
// every ready endpoint has a node hint and one names this node; otherwise
// PreferSameZone when every ready endpoint has a zone hint and one names
// this node's zone; otherwise none (every ready endpoint). Hints are
// ignored whole, never in part, so a node named in no hint keeps all.
func topologyMode(candidates []*messages.Endpoint, node, zone string, log topologyLog) string {
	hasReady := false
	allNodeHints, forNode := true, false
	allZoneHints, forZone := true, false
	for _, ep := range candidates {
		if !ep.GetReady() {
			continue
		}
		hasReady = true
		if len(ep.GetNodeHints()) == 0 {
			allNodeHints = false
		} else if slices.Contains(ep.GetNodeHints(), node) {
			forNode = true
		}
		if len(ep.GetZoneHints()) == 0 {
			allZoneHints = false
		} else if slices.Contains(ep.GetZoneHints(), zone) {
			forZone = true
		}
	}
	if !hasReady {
		return topologyNone
	}
	// kube-proxy's log lines (klog V(2) as debug, V(7) as trace), so the
	// same grep finds why hints were not used.
	if allNodeHints {
		if forNode {
			return topologySameNode
		}
		log.event(zerolog.DebugLevel).Str("node", node).Msg("Ignoring same-node topology hints for service since no hints were provided for node")
	} else {
		log.event(zerolog.TraceLevel).Msg("Ignoring same-node topology hints for service since one or more endpoints is missing a node hint")
	}
	if allZoneHints {
		if forZone {
			return topologySameZone
		}
		if zone == "" {
			log.event(zerolog.DebugLevel).Str("label", corev1.LabelTopologyZone).Msg("Ignoring same-zone topology hints for service since node is missing label")
		} else {
			log.event(zerolog.DebugLevel).Str("zone", zone).Msg("Ignoring same-zone topology hints for service since no hints were provided for zone")
		}
	} else {
		log.event(zerolog.TraceLevel).Msg("Ignoring same-zone topology hints for service since one or more endpoints is missing a zone hint")
	}
	return topologyNone
}

// availableForTopology: whether the mode lets this node use ep. There is
// no fallback here; it happened when the mode was chosen.
func availableForTopology(ep *messages.Endpoint, mode, node, zone string) bool {
	switch mode {
	case topologyNone:
		return true
	case topologySameNode:
		return slices.Contains(ep.GetNodeHints(), node)
	case topologySameZone:
		return slices.Contains(ep.GetZoneHints(), zone)
	}
	return false
}

// topologyLog writes the topology decisions of one service port.
type topologyLog struct {
	log         *zerolog.Logger
	servicePort string
}

func (l topologyLog) event(level zerolog.Level) *zerolog.Event {
	if l.log == nil {
		return nil // a nil *Event discards everything
	}
	return l.log.WithLevel(level).Str("service", l.servicePort)
}
