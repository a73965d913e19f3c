package watcher

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kproxy/kproxy/messages"
)

// ProxyProtocolAnnotation asks kproxy to send a PROXY protocol header
// ("v1" or "v2") to the service's endpoints before the client's bytes.
const ProxyProtocolAnnotation = "kproxy.io/proxy-protocol"

// proxyProtocol reads the service's PROXY protocol annotation. An unknown
// value is an error naming it, and the service serves without the header
// (an endpoint that reads no header would take one for the client's data).
func proxyProtocol(svc *corev1.Service) (messages.ProxyProtocol, error) {
	v, ok := svc.Annotations[ProxyProtocolAnnotation]
	if !ok {
		return messages.ProxyProtocol_PROXY_PROTOCOL_NONE, nil
	}
	switch v {
	case "v1":
		return messages.ProxyProtocol_PROXY_PROTOCOL_V1, nil
	case "v2":
		return messages.ProxyProtocol_PROXY_PROTOCOL_V2, nil
	}
	return messages.ProxyProtocol_PROXY_PROTOCOL_NONE,
		fmt.Errorf("annotation %s: unknown value %q (want \"v1\" or \"v2\"), serving without a PROXY header", ProxyProtocolAnnotation, v)
}

// portProxyProtocol is the header a port of the service sends, and why
// the annotation is not applied to it: an unknown value, or a port that is
// not TCP (a datagram's PROXY header would need the service address each
// redirected datagram was sent to, which kproxy's UDP sockets do not see).
func portProxyProtocol(svc *corev1.Service, port *corev1.ServicePort) (messages.ProxyProtocol, error) {
	pp, err := proxyProtocol(svc)
	if err != nil || pp == messages.ProxyProtocol_PROXY_PROTOCOL_NONE {
		return pp, err
	}
	if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
		return messages.ProxyProtocol_PROXY_PROTOCOL_NONE,
			fmt.Errorf("annotation %s: port %q is %s: PROXY headers are sent on TCP ports only, it is served without one", ProxyProtocolAnnotation, port.Name, port.Protocol)
	}
	return pp, nil
}

// AnnotationErrors lists the service's kproxy.io annotations that are not
// applied, for a source to log once per service change: an unknown value
// once, a value a port cannot use once per such port.
func AnnotationErrors(svc *corev1.Service) []error {
	var errs []error
	if _, err := proxyProtocol(svc); err != nil {
		errs = append(errs, err)
	} else {
		for i := range svc.Spec.Ports {
			if _, err := portProxyProtocol(svc, &svc.Spec.Ports[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if on, _, err := preserveSourceIP(svc); err != nil {
		errs = append(errs, err)
	} else if on {
		for i := range svc.Spec.Ports {
			if _, err := portPreserveSourceIP(svc, &svc.Spec.Ports[i], Options{}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}
