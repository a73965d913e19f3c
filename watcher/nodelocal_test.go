package watcher

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/modeltest"
)

func TestSkip(t *testing.T) {
	labelled := func(k, v string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Labels = map[string]string{k: v} }
	}
	tests := []struct {
		name     string
		svc      *corev1.Service
		opts     Options
		wantSkip bool
		reason   string // substring of the reason
	}{
		{name: "plain service kept", svc: newService()},
		{name: "ExternalName", svc: newService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			wantSkip: true, reason: "ExternalName"},
		{name: "headless clusterIP None", svc: newService(func(s *corev1.Service) { s.Spec.ClusterIP = "None" }),
			wantSkip: true, reason: "headless"},
		{name: "headless clusterIPs None", svc: newService(func(s *corev1.Service) { s.Spec.ClusterIP = ""; s.Spec.ClusterIPs = []string{"None"} }),
			wantSkip: true, reason: "headless"},
		{name: "headless label", svc: newService(labelled(corev1.IsHeadlessService, "")),
			wantSkip: true, reason: corev1.IsHeadlessService},
		{name: "owned by another proxy", svc: newService(labelled(LabelServiceProxyName, "other")),
			wantSkip: true, reason: `"other"`},
		{name: "owned by us", svc: newService(labelled(LabelServiceProxyName, "kproxy")),
			opts: Options{ServiceProxyName: "kproxy"}},
		{name: "owned by a different named proxy", svc: newService(labelled(LabelServiceProxyName, "other")),
			opts: Options{ServiceProxyName: "kproxy"}, wantSkip: true, reason: "kproxy"},
		{name: "unlabelled when we have a name", svc: newService(),
			opts: Options{ServiceProxyName: "kproxy"}, wantSkip: true, reason: LabelServiceProxyName + "=kproxy"},
		{name: "nil", svc: nil, wantSkip: true, reason: "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, skip := Skip(tt.svc, tt.opts)
			if skip != tt.wantSkip || !strings.Contains(reason, tt.reason) {
				t.Fatalf("Skip = (%q, %v), want skip=%v with reason containing %q", reason, skip, tt.wantSkip, tt.reason)
			}
			if tt.svc == nil {
				return
			}
			// BuildServicePorts applies the same rules on its own.
			ports, err := BuildServicePorts(tt.svc, nil, tt.opts)
			if err != nil {
				t.Fatalf("BuildServicePorts: %v", err)
			}
			if got := len(ports) > 0; got == skip {
				t.Fatalf("BuildServicePorts returned %d ports for a service with skip=%v", len(ports), skip)
			}
		})
	}
}

func TestBuildServicePortsNilService(t *testing.T) {
	if _, err := BuildServicePorts(nil, nil, Options{}); err == nil {
		t.Fatal("want an error for a nil service")
	}
}

// TestServicePortFields checks the translation of every ServicePort field.
func TestServicePortFields(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "10.0.0.1"
		s.Spec.ClusterIPs = []string{"10.0.0.1", "FD00::1"}
		s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1"}
		s.Spec.LoadBalancerIP = "198.51.100.1" // also in status: listed once
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example"}, {IP: "2001:db8::2"}}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.HealthCheckNodePort = 32000
		s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		s.Spec.Ports[0].NodePort = 30080
	})
	got := buildOne(t, svc, nil, Options{}).GetServicePort()
	want := &messages.ServicePort{
		Key:                   &messages.ServicePortKey{Namespace: "default", Name: "web", PortName: "http", Protocol: messages.Protocol_UDP},
		Type:                  "LoadBalancer",
		Port:                  80,
		TargetPort:            8080,
		NodePort:              30080,
		ClusterIps:            &messages.IPSet{V4: []string{"10.0.0.1"}, V6: []string{"fd00::1"}},
		ExternalIps:           &messages.IPSet{V4: []string{"192.0.2.1"}, V6: []string{"2001:db8::1"}},
		LoadBalancerIps:       &messages.IPSet{V4: []string{"198.51.100.1"}, V6: []string{"2001:db8::2"}},
		InternalTrafficPolicy: messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
		ExternalTrafficPolicy: messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
		HealthCheckNodePort:   32000,
	}
	if !proto.Equal(got, want) {
		t.Fatalf("service port:\n got %v\nwant %v", got, want)
	}
}

func TestServicePortDefaults(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Service)
		check  func(*messages.ServicePort) bool
	}{
		{"type defaults to ClusterIP", func(s *corev1.Service) { s.Spec.Type = "" },
			func(p *messages.ServicePort) bool { return p.GetType() == "ClusterIP" }},
		{"empty protocol is TCP", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "" },
			func(p *messages.ServicePort) bool { return p.GetKey().GetProtocol() == messages.Protocol_TCP }},
		{"SCTP", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolSCTP },
			func(p *messages.ServicePort) bool { return p.GetKey().GetProtocol() == messages.Protocol_SCTP }},
		{"unset target port is the port", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.IntOrString{} },
			func(p *messages.ServicePort) bool { return p.GetTargetPort() == 80 && p.GetTargetPortName() == "" }},
		{"empty named target port is the port", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("") },
			func(p *messages.ServicePort) bool { return p.GetTargetPort() == 80 && p.GetTargetPortName() == "" }},
		{"named target port", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("web-http") },
			func(p *messages.ServicePort) bool {
				return p.GetTargetPort() == 0 && p.GetTargetPortName() == "web-http"
			}},
		{"clusterIP alone fills the IP set", func(s *corev1.Service) { s.Spec.ClusterIPs = nil; s.Spec.ClusterIP = "fd00::5" },
			func(p *messages.ServicePort) bool {
				return slices.Equal(p.GetClusterIps().GetV6(), []string{"fd00::5"})
			}},
		{"no cluster IP at all", func(s *corev1.Service) { s.Spec.ClusterIP = "" },
			func(p *messages.ServicePort) bool {
				return p.GetClusterIps().Len() == 0
			}},
		{"traffic policies default to Cluster", func(s *corev1.Service) {},
			func(p *messages.ServicePort) bool {
				return p.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_CLUSTER &&
					p.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_CLUSTER
			}},
		{"no affinity", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityNone },
			func(p *messages.ServicePort) bool {
				return p.GetSessionAffinity() == messages.SessionAffinity_SESSION_AFFINITY_NONE && p.GetAffinityTimeoutSeconds() == 0
			}},
		{"ClientIP affinity defaults to 10800s", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
			func(p *messages.ServicePort) bool {
				return p.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP && p.GetAffinityTimeoutSeconds() == 10800
			}},
		{"ClientIP affinity with timeout", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}}
		}, func(p *messages.ServicePort) bool { return p.GetAffinityTimeoutSeconds() == 60 }},
		{"empty namespace is default", func(s *corev1.Service) { s.Namespace = "" },
			func(p *messages.ServicePort) bool { return p.GetKey().GetNamespace() == "default" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := buildOne(t, newService(tt.mutate), nil, Options{}).GetServicePort()
			if !tt.check(sp) {
				t.Fatalf("unexpected service port: %v", sp)
			}
		})
	}
}

func TestServicePortsOnePerPort(t *testing.T) {
	svc := newService(func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "https", Port: 443},
			{Name: "http", Port: 80},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}
	})
	ports, err := BuildServicePorts(svc, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"default/web:https/TCP", "default/web:http/TCP", "default/web:dns/UDP"}
	if got := modeltest.KeyIDs(ports); !slices.Equal(got, want) {
		t.Fatalf("keys = %v, want %v (in spec order)", got, want)
	}
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Service)
		want   []string // substrings of the error
	}{
		{"port too large", func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 },
			[]string{"spec.ports[0].port: 70000 is not in 1-65535"}},
		{"port zero", func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 },
			[]string{"spec.ports[0].port: 0 is not in 1-65535"}},
		{"unknown protocol", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" },
			[]string{`spec.ports[0].protocol: unsupported value "ICMP"`}},
		{"node port out of range", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 65536 },
			[]string{"spec.ports[0].nodePort: 65536 is not in 1-65535"}},
		{"target port out of range", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(-1) },
			[]string{"spec.ports[0].targetPort: -1 is not in 1-65535"}},
		{"bad target port name", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("Not_A_Name") },
			[]string{`spec.ports[0].targetPort: "Not_A_Name" is not a valid port name`}},
		{"bad cluster IP", func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.300" },
			[]string{`spec.clusterIP: "10.0.0.300" is not a valid IP address`}},
		{"bad second cluster IP", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.0.0.1", "fd00::zz"} },
			[]string{`spec.clusterIPs[1]: "fd00::zz" is not a valid IP address`}},
		{"clusterIP disagrees with clusterIPs", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.0.0.2"} },
			[]string{`spec.clusterIPs[0]: "10.0.0.2" must equal spec.clusterIP "10.0.0.1"`}},
		{"bad external IP", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1", "example.com"} },
			[]string{`spec.externalIPs[1]: "example.com" is not a valid IP address`}},
		{"bad load balancer ingress IP", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3"}}
		}, []string{`status.loadBalancer.ingress[0].ip: "1.2.3" is not a valid IP address`}},
		{"duplicate port names", func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "http", Port: 81})
		}, []string{`spec.ports[1].name: duplicate "http" (also spec.ports[0])`}},
		{"two unnamed ports", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Port: 80}, {Port: 81}}
		}, []string{"spec.ports[1].name: required, spec.ports[0] is unnamed too"}},
		{"same port and protocol twice", func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "other", Port: 80, Protocol: corev1.ProtocolTCP})
		}, []string{"spec.ports[1]: duplicate port 80/TCP (also spec.ports[0])"}},
		{"affinity timeout zero", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](0)}}
		}, []string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0 is not in 1-86400"}},
		{"affinity timeout above a day", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](86401)}}
		}, []string{"timeoutSeconds: 86401 is not in 1-86400"}},
		{"unknown affinity", func(s *corev1.Service) { s.Spec.SessionAffinity = "Cookie" },
			[]string{`spec.sessionAffinity: unsupported value "Cookie"`}},
		{"unknown type", func(s *corev1.Service) { s.Spec.Type = "Magic" },
			[]string{`spec.type: unsupported value "Magic"`}},
		{"unknown traffic policies", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicy("Nearby"))
			s.Spec.ExternalTrafficPolicy = "Global"
		}, []string{`spec.internalTrafficPolicy: unsupported value "Nearby"`, `spec.externalTrafficPolicy: unsupported value "Global"`}},
		{"missing name", func(s *corev1.Service) { s.Name = "" },
			[]string{"metadata.name: required"}},
		{"all problems at once", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80}, {Name: "b", Port: 70000, Protocol: "ICMP"}}
		}, []string{"spec.ports[1].port: 70000 is not in 1-65535; spec.ports[1].protocol"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ports, err := BuildServicePorts(newService(tt.mutate), nil, Options{})
			if err == nil {
				t.Fatalf("want an error, got ports %v", modeltest.KeyIDs(ports))
			}
			if ports != nil {
				t.Fatalf("an invalid service must yield no ports, got %v", modeltest.KeyIDs(ports))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
