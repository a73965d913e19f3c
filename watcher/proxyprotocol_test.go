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
