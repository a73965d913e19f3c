package messages

import (
	"net"
	"strconv"
)

// Helpers of the node-local model (model.proto). Like the generated
// getters they accept a nil receiver.

// ID renders the key as kube-proxy logs a ServicePortName:
// "namespace/name:portName/PROTOCOL".
func (k *ServicePortKey) ID() string {
	if k == nil {
		return "<nil>"
	}
	// Concatenated, not fmt.Sprintf: it is called several times per
	// service port and change, which adds up at 10,000 service ports.
	return k.GetNamespace() + "/" + k.GetName() + ":" + k.GetPortName() + "/" + k.GetProtocol().String()
}

// Service names the key's Service as Kubernetes keys its objects:
// "namespace/name".
func (k *ServicePortKey) Service() string {
	return k.GetNamespace() + "/" + k.GetName()
}

// All returns the set's addresses, IPv4 first, in a new slice the caller
// may keep or append to; nil when the set is empty.
func (s *IPSet) All() []string {
	if s.Len() == 0 {
		return nil
	}
	return append(append(make([]string, 0, s.Len()), s.GetV4()...), s.GetV6()...)
}

// Len is the number of addresses of both families.
func (s *IPSet) Len() int {
	return len(s.GetV4()) + len(s.GetV6())
}

// Address is the dialable "ip:port" of an endpoint (its first IP), or "" when it has none.
func (e *Endpoint) Address() string {
	if len(e.GetIps()) == 0 {
		return ""
	}
	return net.JoinHostPort(e.GetIps()[0], strconv.Itoa(int(e.GetPort())))
}
