package watcher

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kproxy/kproxy/messages"
)

// TestProxyProtocolAnnotation: "v1" and "v2" reach the model; no
// annotation is none; an unknown value is none, with an error naming the
// annotation and the value in the service port (its state) and for the
// source's log.
func TestProxyProtocolAnnotation(t *testing.T) {
	for _, tc := range []struct {
		value   *string
		want    messages.ProxyProtocol
		wantErr string
	}{
		{nil, messages.ProxyProtocol_PROXY_PROTOCOL_NONE, ""},
		{ptr("v1"), messages.ProxyProtocol_PROXY_PROTOCOL_V1, ""},
		{ptr("v2"), messages.ProxyProtocol_PROXY_PROTOCOL_V2, ""},
		{ptr("v3"), messages.ProxyProtocol_PROXY_PROTOCOL_NONE, `annotation kproxy.io/proxy-protocol: unknown value "v3"`},
		{ptr("V1"), messages.ProxyProtocol_PROXY_PROTOCOL_NONE, `unknown value "V1"`},
		{ptr(""), messages.ProxyProtocol_PROXY_PROTOCOL_NONE, `unknown value ""`},
	} {
		svc := newService(func(s *corev1.Service) {
			if tc.value != nil {
				s.Annotations = map[string]string{ProxyProtocolAnnotation: *tc.value}
			}
		})
		sp := buildOne(t, svc, nil, Options{}).GetServicePort()
		if sp.GetProxyProtocol() != tc.want {
			t.Errorf("%v: proxy protocol %v, want %v", tc.value, sp.GetProxyProtocol(), tc.want)
		}
		errs := AnnotationErrors(svc)
		if tc.wantErr == "" {
			if len(errs) != 0 || len(sp.GetAnnotationErrors()) != 0 {
				t.Errorf("%v: errors %v, state %q; want none", tc.value, errs, sp.GetAnnotationErrors())
			}
			continue
		}
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
			t.Errorf("%v: errors %v, want one containing %q", tc.value, errs, tc.wantErr)
		}
		if len(sp.GetAnnotationErrors()) != 1 || !strings.Contains(sp.GetAnnotationErrors()[0], tc.wantErr) {
			t.Errorf("%v: state annotation errors %q, want one containing %q", tc.value, sp.GetAnnotationErrors(), tc.wantErr)
		}
	}
}

// TestProxyProtocolTCPOnly: a UDP port of an annotated service is served
// without a header and says so in its state; its TCP port sends one.
func TestProxyProtocolTCPOnly(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Annotations = map[string]string{ProxyProtocolAnnotation: "v2"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	})
	ports, err := BuildServicePorts(svc, nil, Options{})
	if err != nil || len(ports) != 2 {
		t.Fatalf("BuildServicePorts: %d ports, %v", len(ports), err)
	}
	for _, p := range ports {
		sp := p.GetServicePort()
		switch sp.GetKey().GetProtocol() {
		case messages.Protocol_TCP:
			if sp.GetProxyProtocol() != messages.ProxyProtocol_PROXY_PROTOCOL_V2 || len(sp.GetAnnotationErrors()) != 0 {
				t.Errorf("TCP port: %v, errors %q; want v2, none", sp.GetProxyProtocol(), sp.GetAnnotationErrors())
			}
		case messages.Protocol_UDP:
			if sp.GetProxyProtocol() != messages.ProxyProtocol_PROXY_PROTOCOL_NONE || len(sp.GetAnnotationErrors()) != 1 ||
				!strings.Contains(sp.GetAnnotationErrors()[0], `port "dns" is UDP`) {
				t.Errorf("UDP port: %v, errors %q; want none, with the port named", sp.GetProxyProtocol(), sp.GetAnnotationErrors())
			}
		}
	}
	if errs := AnnotationErrors(svc); len(errs) != 1 {
		t.Errorf("AnnotationErrors: %v, want the UDP port's", errs)
	}
}
