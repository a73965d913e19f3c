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

// AnnotationErrors lists the service's kproxy.io annotations that are not
// applied, for a source to log once per service change.
func AnnotationErrors(svc *corev1.Service) []error {
	if _, err := proxyProtocol(svc); err != nil {
		return []error{err}
	}
	return nil
}
