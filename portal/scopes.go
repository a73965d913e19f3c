package portal

import (
	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

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
