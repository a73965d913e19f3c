package watcher

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestPreserveSourceIP: the annotation's "true" and "false", the node's
// option for externalTrafficPolicy Local (which "false" opts out of), and
// an unknown value, which is off with an error naming it in the service
// port (its state) and for the source's log.
func TestPreserveSourceIP(t *testing.T) {
	for _, tc := range []struct {
		value    *string
		etpLocal bool
		option   bool
		want     bool
		wantErr  string
	}{
		{nil, false, false, false, ""},
		{ptr("true"), false, false, true, ""},
		{ptr("false"), false, false, false, ""},
		{nil, true, false, false, ""},
		{nil, true, true, true, ""},
		{nil, false, true, false, ""}, // the option is for eTP Local only
		{ptr("false"), true, true, false, ""},
		{ptr("yes"), false, false, false, `annotation kproxy.io/preserve-source-ip: unknown value "yes"`},
		{ptr("True"), false, false, false, `unknown value "True"`},
		{ptr(""), false, false, false, `unknown value ""`},
		{ptr("yes"), true, true, true, `unknown value "yes"`}, // unknown is as absent: the option decides
	} {
		svc := newService(func(s *corev1.Service) {
			if tc.value != nil {
				s.Annotations = map[string]string{PreserveSourceIPAnnotation: *tc.value}
			}
			if tc.etpLocal {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}
		})
		name := "<none>"
		if tc.value != nil {
			name = *tc.value
		}
		sp := buildOne(t, svc, nil, Options{PreserveSourceIPForLocalTrafficPolicy: tc.option}).GetServicePort()
		if sp.GetPreserveSourceIp() != tc.want {
			t.Errorf("%s, eTP Local %v, option %v: preserve source IP %v, want %v", name, tc.etpLocal, tc.option, sp.GetPreserveSourceIp(), tc.want)
		}
		errs := AnnotationErrors(svc)
		if tc.wantErr == "" {
			if len(errs) != 0 || len(sp.GetAnnotationErrors()) != 0 {
				t.Errorf("%s: errors %v, state %q; want none", name, errs, sp.GetAnnotationErrors())
			}
			continue
		}
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
			t.Errorf("%s: errors %v, want one containing %q", name, errs, tc.wantErr)
		}
		if len(sp.GetAnnotationErrors()) != 1 || !strings.Contains(sp.GetAnnotationErrors()[0], tc.wantErr) {
			t.Errorf("%s: state annotation errors %q, want one containing %q", name, sp.GetAnnotationErrors(), tc.wantErr)
		}
	}
}

// TestPreserveSourceIPRemoteEndpoints: an annotated service port's note
// names its endpoints on other nodes (they see the node's address); one
// whose endpoints are all local, or that is not annotated, names none. The
// note is the state report's, not the definition's, which endpoints do not
// change.
func TestPreserveSourceIPRemoteEndpoints(t *testing.T) {
	slice := newSlice("web-1", newEndpoint("10.1.0.1", "node-a", readyEP), newEndpoint("10.1.0.2", "node-b", readyEP))
	local := newSlice("web-1", newEndpoint("10.1.0.1", "node-a", readyEP))
	annotated := newService(func(s *corev1.Service) {
		s.Annotations = map[string]string{PreserveSourceIPAnnotation: "true"}
	})
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		slice   *discoveryv1.EndpointSlice
		wantErr string
	}{
		{"annotated, one remote", annotated, slice, "endpoints on other nodes see the node's address, not the client's: 10.1.0.2:8080"},
		{"annotated, all local", annotated, local, ""},
		{"not annotated", newService(), slice, ""},
	} {
		spe := buildOne(t, tc.svc, []*discoveryv1.EndpointSlice{tc.slice}, Options{NodeName: "node-a"})
		if errs := spe.GetServicePort().GetAnnotationErrors(); len(errs) != 0 {
			t.Errorf("%s: the definition holds %q, want nothing about endpoints", tc.name, errs)
		}
		got := ""
		if spe.GetServicePort().GetPreserveSourceIp() {
			got = RemoteEndpointsNote(spe.GetEndpoints())
		}
		if tc.wantErr == "" && got != "" || tc.wantErr != "" && !strings.Contains(got, tc.wantErr) {
			t.Errorf("%s: state annotation errors %q, want %q", tc.name, got, tc.wantErr)
		}
		if strings.Contains(got, "10.1.0.1") {
			t.Errorf("%s: the local endpoint is named: %q", tc.name, got)
		}
	}
}

// TestPreserveSourceIPProtocols: the TCP and UDP ports of an annotated
// service preserve the client's address; an SCTP port does not and says so
// in its state.
func TestPreserveSourceIPProtocols(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Annotations = map[string]string{PreserveSourceIPAnnotation: "true"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
			corev1.ServicePort{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 2905})
	})
	ports, err := BuildServicePorts(svc, nil, Options{})
	if err != nil || len(ports) != 3 {
		t.Fatalf("BuildServicePorts: %d ports, %v", len(ports), err)
	}
	for _, p := range ports {
		sp := p.GetServicePort()
		switch sp.GetKey().GetProtocol().String() {
		case "TCP", "UDP":
			if !sp.GetPreserveSourceIp() || len(sp.GetAnnotationErrors()) != 0 {
				t.Errorf("%s port: %v, errors %q; want on, none", sp.GetKey().GetProtocol(), sp.GetPreserveSourceIp(), sp.GetAnnotationErrors())
			}
		case "SCTP":
			if sp.GetPreserveSourceIp() || len(sp.GetAnnotationErrors()) != 1 || !strings.Contains(sp.GetAnnotationErrors()[0], `port "sig" is SCTP`) {
				t.Errorf("SCTP port: %v, errors %q; want off, with the port named", sp.GetPreserveSourceIp(), sp.GetAnnotationErrors())
			}
		default:
			t.Errorf("unexpected port %v", sp.GetKey())
		}
	}
	if errs := AnnotationErrors(svc); len(errs) != 1 {
		t.Errorf("AnnotationErrors: %v, want the SCTP port's", errs)
	}
}
