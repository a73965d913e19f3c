package watcher

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// builtEndpoints is the addresses of the one port Objects builds for svc.
func builtEndpoints(t *testing.T, v View, svc string) []string {
	t.Helper()
	ports, err := v.Build(svc)
	if err != nil || len(ports) != 1 {
		t.Fatalf("Build(%s) = %v, %v; want one port", svc, ports, err)
	}
	var out []string
	for _, ep := range ports[0].GetEndpoints() {
		out = append(out, ep.Address())
	}
	return out
}

// Objects builds from what the events carried, in any order: a slice
// before its Service, a slice relabelled to another service (both change),
// deletes of either.
func TestObjectsFollowEvents(t *testing.T) {
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.Nop())
	a := newSlice("web-a", newEndpoint("192.0.2.1", "node-a", readyEP))
	if got := o.Apply(EndpointSliceEvent(Added, a)); !slices.Equal(got, []string{"default/web"}) {
		t.Fatalf("slice first marks %v", got)
	}
	if ports, err := o.Build("default/web"); len(ports) != 0 || err != nil {
		t.Fatalf("a slice without its Service builds %v, %v", ports, err)
	}
	if got := o.ServiceNames(); len(got) != 0 {
		t.Fatalf("services %v before any Service", got)
	}
	o.Apply(ServiceEvent(Added, newService()))
	if got := builtEndpoints(t, o, "default/web"); !slices.Equal(got, []string{"192.0.2.1:8080"}) {
		t.Fatalf("endpoints %v", got)
	}
	api := newService(func(s *corev1.Service) { s.Name, s.Spec.ClusterIP = "api", "10.0.0.2" })
	o.Apply(ServiceEvent(Added, api))
	if got := o.ServiceNames(); !slices.Equal(got, []string{"default/api", "default/web"}) {
		t.Fatalf("services %v", got)
	}

	moved := a.DeepCopy()
	moved.Labels[discoveryv1.LabelServiceName] = "api"
	if got := o.Apply(EndpointSliceEvent(Updated, moved)); !slices.Equal(got, []string{"default/web", "default/api"}) {
		t.Fatalf("relabelled slice marks %v; want both services", got)
	}
	if got := builtEndpoints(t, o, "default/web"); len(got) != 0 {
		t.Fatalf("web keeps %v after its slice moved", got)
	}
	if got := builtEndpoints(t, o, "default/api"); !slices.Equal(got, []string{"192.0.2.1:8080"}) {
		t.Fatalf("api %v after the slice moved to it", got)
	}

	unlabelled := moved.DeepCopy()
	delete(unlabelled.Labels, discoveryv1.LabelServiceName)
	if got := o.Apply(EndpointSliceEvent(Updated, unlabelled)); !slices.Equal(got, []string{"default/api"}) {
		t.Fatalf("unlabelled slice marks %v", got)
	}
	if got := o.Apply(EndpointSliceEvent(Deleted, unlabelled)); len(got) != 0 {
		t.Fatalf("deleting a slice of no service marks %v", got)
	}

	o.Apply(ServiceEvent(Deleted, api))
	if ports, err := o.Build("default/api"); len(ports) != 0 || err != nil {
		t.Fatalf("deleted service builds %v, %v", ports, err)
	}
	o.Apply(ServiceEvent(Deleted, newService()))
	if len(o.services) != 0 || len(o.sliceOwner) != 0 {
		t.Fatalf("objects left after every delete: %d services, %d slices", len(o.services), len(o.sliceOwner))
	}
}

// A Node event changes every service's view only when the zone changed
// (topology hints); a core's view of another node has its own zone.
func TestObjectsNodeZones(t *testing.T) {
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.Nop())
	node := func(name, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
	}
	if got := o.Apply(NodeEvent(Added, node("node-a", "z1"))); !slices.Equal(got, []string{""}) {
		t.Fatalf("a zone marks %q; want every service", got)
	}
	if got := o.Apply(NodeEvent(Updated, node("node-a", "z1"))); len(got) != 0 {
		t.Fatalf("an unchanged zone marks %q", got)
	}
	o.Apply(NodeEvent(Added, node("node-b", "z2")))
	hinted := newSlice("web-a", newEndpoint("192.0.2.1", "node-a", readyEP), newEndpoint("192.0.2.2", "node-b", readyEP))
	hinted.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
	hinted.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z2"}}}
	o.Apply(ServiceEvent(Added, newService()))
	o.Apply(EndpointSliceEvent(Added, hinted))
	if got := builtEndpoints(t, o, "default/web"); !slices.Equal(got, []string{"192.0.2.1:8080"}) {
		t.Fatalf("node-a (z1) uses %v", got)
	}
	if got := builtEndpoints(t, o.ViewFor("node-b"), "default/web"); !slices.Equal(got, []string{"192.0.2.2:8080"}) {
		t.Fatalf("node-b (z2) uses %v", got)
	}
}

// A Service is checked when it arrives: an invalid one builds its error
// (the previous state is the Tracker's to keep), its ignored fields are
// logged once per arrival, not per build.
func TestObjectsCheckOnArrival(t *testing.T) {
	var logs bytes.Buffer
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.New(&logs))
	bad := newService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 })
	o.Apply(ServiceEvent(Added, bad))
	for range 2 {
		if _, err := o.Build("default/web"); err == nil || !strings.Contains(err.Error(), "spec.ports[0].port: 70000") {
			t.Fatalf("invalid service: %v", err)
		}
	}
	o.Apply(ServiceEvent(Updated, newService(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/33"}
	})))
	for range 3 {
		if _, err := o.Build("default/web"); err != nil {
			t.Fatalf("valid again: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "Invalid CIDR ignored"); n != 1 {
		t.Fatalf("the bad source range logged %d times; want once:\n%s", n, logs.String())
	}
}

// The Tracker applies events to a view that takes them, and marks what
// they changed.
func TestTrackerHandlesObjectEvents(t *testing.T) {
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.Nop())
	tr := NewTracker(o)
	tr.Handle(ServiceEvent(Added, newService()))
	tr.Handle(EndpointSliceEvent(Added, newSlice("web-a", newEndpoint("192.0.2.1", "node-a", readyEP))))
	ch := tr.Flush()
	if len(ch.Upserts) != 1 || len(ch.Upserts[0].GetEndpoints()) != 1 {
		t.Fatalf("first flush %v", ch.Upserts)
	}
	tr.Handle(NodeEvent(Updated, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}))
	if tr.Pending() {
		t.Fatal("a Node without a zone change left work")
	}
	tr.Handle(EndpointSliceEvent(Deleted, newSlice("web-a")))
	if ch := tr.Flush(); len(ch.Upserts) != 1 || len(ch.Upserts[0].GetEndpoints()) != 0 {
		t.Fatalf("after the slice's delete %v", ch.Upserts)
	}
}

// A Service is translated once, when it arrives: builds after an
// EndpointSlice change, and every node's build, share its definition (the
// very ServicePort message, so the Tracker's diff finds it unchanged
// without comparing), and only a Service event makes a new one.
func TestObjectsDefineServiceOnArrival(t *testing.T) {
	o := NewObjects(Options{NodeName: "node-a"}, zerolog.Nop())
	o.Apply(ServiceEvent(Added, newService()))
	o.Apply(EndpointSliceEvent(Added, newSlice("web-a", newEndpoint("192.0.2.1", "node-a", readyEP))))
	first, _ := o.Build("default/web")
	o.Apply(EndpointSliceEvent(Updated, newSlice("web-a", newEndpoint("192.0.2.2", "node-b", readyEP))))
	second, _ := o.Build("default/web")
	other, _ := o.ViewFor("node-b").Build("default/web")
	if len(first) != 1 || len(second) != 1 || len(other) != 1 {
		t.Fatalf("builds %v, %v, %v; want one port each", first, second, other)
	}
	if second[0].GetServicePort() != first[0].GetServicePort() || other[0].GetServicePort() != first[0].GetServicePort() {
		t.Fatal("an endpoint change, or another node, built the Service's definition again")
	}
	if got := builtEndpoints(t, o, "default/web"); !slices.Equal(got, []string{"192.0.2.2:8080"}) {
		t.Fatalf("endpoints %v after the slice changed", got)
	}
	o.Apply(ServiceEvent(Updated, newService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 })))
	third, _ := o.Build("default/web")
	if len(third) != 1 || third[0].GetServicePort() == first[0].GetServicePort() || third[0].GetServicePort().GetPort() != 81 {
		t.Fatalf("after the Service changed: %v; want a new definition with port 81", third)
	}

	// An endpoint change is unpaced and keeps the definition, also for a
	// service that preserves the client's address whose endpoints move to
	// another node (the note naming them is the state report's).
	annotated := func(s *corev1.Service) {
		s.Spec.Ports[0].Port = 81
		s.Annotations = map[string]string{PreserveSourceIPAnnotation: "true"}
	}
	o.Apply(ServiceEvent(Updated, newService(annotated)))
	tr := NewTracker(o)
	tr.Mark("default/web")
	defined := tr.Flush().Upserts[0].GetServicePort()
	tr.Handle(EndpointSliceEvent(Updated, newSlice("web-a", newEndpoint("192.0.2.3", "node-b", readyEP))))
	ch, held := tr.FlushUnpaced()
	if held || len(ch.Upserts) != 1 || ch.Upserts[0].GetServicePort() != defined {
		t.Fatalf("an endpoint change: held %v, upserts %v; want one, unpaced, with the same definition", held, ch.Upserts)
	}
	tr.Handle(ServiceEvent(Updated, newService(annotated)))
	if ch := tr.Flush(); len(ch.Upserts)+len(ch.Deletes) != 0 {
		t.Fatalf("a Service event that changed nothing flushed %v", ch.Upserts)
	}
}
