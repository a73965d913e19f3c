package steer

import (
	"github.com/kproxy/kproxy/messages"
)

// ClusterScopeOnExternalPort reports whether a service port's second
// (external) proxy port serves the cluster's endpoints instead of the
// external scope. That is so in kernel modes under both traffic policies
// Local: the two scopes are then the same local endpoints, so traffic from
// outside shares the first proxy port, and the second serves what
// kube-proxy short-circuits to the cluster's endpoints, the node's own and
// the pods' traffic to external IPs, load-balancer IPs and node ports.
// rules.ForServicePort steers so; the Balancer serves so
// (messages.SetEndpoints.external_scope_is_cluster).
func ClusterScopeOnExternalPort(sp *messages.ServicePort, mode string, externalProxyPort int) bool {
	return KernelMode(mode) && externalProxyPort != 0 &&
		sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL &&
		sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
}
