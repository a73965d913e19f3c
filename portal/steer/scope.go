package steer

import (
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// ClusterScopeOnExternalPort reports whether a service port's second
// (external) proxy port serves the cluster's endpoints instead of the
// external scope. That is so in kernel modes under both traffic policies
// Local: the two scopes are then the same local endpoints, so traffic from
// outside shares the first proxy port, and the second serves what
// kube-proxy short-circuits to the cluster's endpoints, the node's own and
// the pods' traffic to external IPs, load-balancer IPs and node ports.
// rules.ForServicePort steers so; BalancerEndpoints serves so.
func ClusterScopeOnExternalPort(sp *messages.ServicePort, mode string, externalProxyPort int) bool {
	return KernelMode(mode) && externalProxyPort != 0 &&
		sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL &&
		sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
}

// BalancerEndpoints are the endpoints as a service port's Balancer sees
// them, by the proxy port its connections came to: the internal scope for
// the first, the external one for the second, which under
// ClusterScopeOnExternalPort is the cluster's endpoints (copies; endpoints
// is not modified).
func BalancerEndpoints(sp *messages.ServicePort, mode string, externalProxyPort int, endpoints []*messages.Endpoint) []*messages.Endpoint {
	if !ClusterScopeOnExternalPort(sp, mode, externalProxyPort) {
		return endpoints
	}
	out := make([]*messages.Endpoint, len(endpoints))
	for i, e := range endpoints {
		c := proto.CloneOf(e)
		c.External = e.GetCluster()
		out[i] = c
	}
	return out
}
