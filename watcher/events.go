package watcher

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Op is what happened to an Event's object.
type Op uint8

const (
	// Changed: a source that keeps its own Store (file, remote) changed
	// a service; its View has the change and the Event carries no object.
	Changed Op = iota
	Added
	Updated
	Deleted
)

func (o Op) String() string {
	return [...]string{"Changed", "Added", "Updated", "Deleted"}[o]
}

// Kind is the kind of source object an Event is about.
type Kind uint8

const (
	KindService       Kind = iota // a Service (the Kubernetes source)
	KindEndpointSlice             // an EndpointSlice (the Kubernetes source)
	KindNode                      // a Node (the Kubernetes source)
	KindFile                      // a service of the file source's Store
	KindRemote                    // a service of the remote source's Store
)

// String is the kind's name, as metrics and traces label it.
func (k Kind) String() string {
	return [...]string{"Service", "EndpointSlice", "Node", "File", "Remote"}[k]
}

// Event is what a source tells its consumer, as kube-proxy's config
// handlers (OnServiceAdd, OnEndpointSliceUpdate, ...) tell its proxier.
// The Kubernetes source hands the object over: the Service, EndpointSlice
// or Node as it is now, or as it last was when Deleted. Its consumer
// applies it to the source's Objects (Tracker.Handle), so what the
// Tracker builds is what the events carried, never a second read of the
// informers' caches.
type Event struct {
	Kind Kind
	Op   Op
	// Service is the service the event is about ("namespace/name"), or
	// every service when empty. An EndpointSlice event names the service
	// of its label.
	Service string
	// Node is the node whose view changed, for a source serving many
	// nodes (NodeViews); empty means every node's.
	Node string
	// Object is a *corev1.Service, *discoveryv1.EndpointSlice or
	// *corev1.Node; nil from a source with its own Store.
	Object metav1.Object
}

// ServiceEvent is a Service's event.
func ServiceEvent(op Op, svc *corev1.Service) Event {
	return Event{Kind: KindService, Op: op, Service: svc.Namespace + "/" + svc.Name, Object: svc}
}

// EndpointSliceEvent is an EndpointSlice's event. A slice without a
// kubernetes.io/service-name label serves no service, but its event still
// counts: the slice may have served one before.
func EndpointSliceEvent(op Op, sl *discoveryv1.EndpointSlice) Event {
	return Event{Kind: KindEndpointSlice, Op: op, Service: sliceServiceKey(sl), Object: sl}
}

// sliceServiceKey is the "namespace/name" of the service a slice serves,
// "" when it names none.
func sliceServiceKey(sl *discoveryv1.EndpointSlice) string {
	if name := sl.Labels[discoveryv1.LabelServiceName]; name != "" {
		return sl.Namespace + "/" + name
	}
	return ""
}

// NodeEvent is a Node's event: every service of that node's view.
func NodeEvent(op Op, n *corev1.Node) Event {
	return Event{Kind: KindNode, Op: op, Node: n.Name, Object: n}
}
