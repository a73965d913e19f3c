package messages

import (
	"fmt"
	"net"
	"strconv"
)

// ID renders the key as kube-proxy logs a ServicePortName:
// "namespace/name:portName/PROTOCOL".
func (k *ServicePortKey) ID() string {
	if k == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s/%s:%s/%s", k.GetNamespace(), k.GetName(), k.GetPortName(), k.GetProtocol())
}

// Address is the dialable "ip:port" of an endpoint (its first IP), or "" when it has none.
func (e *Endpoint) Address() string {
	if len(e.GetIps()) == 0 {
		return ""
	}
	return net.JoinHostPort(e.GetIps()[0], strconv.Itoa(int(e.GetPort())))
}
