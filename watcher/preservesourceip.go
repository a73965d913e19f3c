package watcher

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kproxy/kproxy/messages"
)

// PreserveSourceIPAnnotation asks kproxy to dial the service's node-local
// endpoints from the client's own address ("true"), or not ("false"),
// whatever Options.PreserveSourceIPForLocalTrafficPolicy says.
const PreserveSourceIPAnnotation = "kproxy.io/preserve-source-ip"

// preserveSourceIP reads the annotation: set is false when it is absent
// (or unknown, with the error naming the value: the service is served as
// without it).
func preserveSourceIP(svc *corev1.Service) (on, set bool, err error) {
	v, ok := svc.Annotations[PreserveSourceIPAnnotation]
	if !ok {
		return false, false, nil
	}
	switch v {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, fmt.Errorf("annotation %s: unknown value %q (want \"true\" or \"false\"), endpoints see the node's address", PreserveSourceIPAnnotation, v)
}

// portPreserveSourceIP decides whether a port of the service dials its
// node-local endpoints from the client's address: the annotation, else
// the node's option for externalTrafficPolicy Local. TCP and UDP ports do
// (a userspace proxy carries no SCTP).
func portPreserveSourceIP(svc *corev1.Service, port *corev1.ServicePort, opts Options) (bool, error) {
	on, set, err := preserveSourceIP(svc)
	if !set {
		on = opts.PreserveSourceIPForLocalTrafficPolicy && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	}
	if !on {
		return false, err
	}
	if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP && port.Protocol != corev1.ProtocolUDP {
		return false, fmt.Errorf("%s: port %q is %s: only TCP and UDP ports reach endpoints from the client's address, it is served from the node's", PreserveSourceIPAnnotation, port.Name, port.Protocol)
	}
	return true, err
}

// RemoteEndpointsNote says which endpoints of a service port that
// preserves the client's address are on other nodes and get the node's
// (their replies would not come back through this node), or "". It
// depends on the endpoints, so it is not part of the definition: a
// service port's state report adds it to the annotation errors.
func RemoteEndpointsNote(eps []*messages.Endpoint) string {
	var remote []string
	for _, e := range eps {
		if !e.GetLocal() && e.Address() != "" {
			remote = append(remote, e.Address())
		}
	}
	if len(remote) == 0 {
		return ""
	}
	slices.Sort(remote)
	return fmt.Sprintf("%s: endpoints on other nodes see the node's address, not the client's: %s", PreserveSourceIPAnnotation, strings.Join(remote, ", "))
}
