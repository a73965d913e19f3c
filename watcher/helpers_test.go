package watcher

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/modeltest"
)

// Builders keep each test focused on the one field it is about.

func ptr[T any](v T) *T { return &v }

// newService returns default/web, ClusterIP 10.0.0.1, port "http" 80 ->
// 8080, changed by the given mutations.
func newService(mutate ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.0.1",
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	return svc
}

// newSlice returns an IPv4 slice of default/web offering port "http" 8080.
func newSlice(name string, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default",
			Name:      name,
			Labels:    map[string]string{discoveryv1.LabelServiceName: "web"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		Endpoints:   endpoints,
	}
}

// conditions is a readable way to write ready/serving/terminating.
type conditions struct{ ready, serving, terminating *bool }

var (
	readyEP       = conditions{ready: ptr(true), serving: ptr(true), terminating: ptr(false)}
	notReadyEP    = conditions{ready: ptr(false), serving: ptr(false), terminating: ptr(false)}
	terminatingEP = conditions{ready: ptr(false), serving: ptr(true), terminating: ptr(true)}  // serving while terminating
	goneEP        = conditions{ready: ptr(false), serving: ptr(false), terminating: ptr(true)} // terminating, no longer serving
	unsetEP       = conditions{}
)

func newEndpoint(ip, node string, c conditions) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{
			Ready: c.ready, Serving: c.serving, Terminating: c.terminating,
		},
	}
	if node != "" {
		ep.NodeName = ptr(node)
	}
	return ep
}

// buildOne builds a service expected to be valid with exactly one port.
func buildOne(t *testing.T, svc *corev1.Service, slices []*discoveryv1.EndpointSlice, opts Options) *messages.ServicePortEndpoints {
	t.Helper()
	ports, err := BuildServicePorts(svc, slices, opts)
	if err != nil {
		t.Fatalf("BuildServicePorts: %v", err)
	}
	if len(ports) != 1 {
		t.Fatalf("got %d service ports, want 1: %v", len(ports), modeltest.KeyIDs(ports))
	}
	return ports[0]
}
