package filesource

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kproxy/kproxy/watcher"
)

var (
	_ watcher.NodeViews  = (*NodesFileSource)(nil)
	_ watcher.Classifier = (*NodesFileSource)(nil)
)

// NodesFileSource is the file source for many nodes, as the Kubernetes
// source is for a core: it polls and decodes the manifests once (a
// FileSource) and hands each Service and EndpointSlice that changed over
// as an event carrying the object, which its consumer applies to the
// source's watcher.Objects (watcher.Affected). Every node's view is built
// from those, so a core builds each change once per class of nodes that
// see it alike. Bad input keeps what was: a service whose documents
// failed keeps its previous objects, and when some document could not
// even be named, nothing missing is deleted.
type NodesFileSource struct {
	*watcher.Objects
	fs *FileSource

	mu     sync.Mutex
	notify func(watcher.Event)
	// What was handed over, by "namespace/name": the very documents, so
	// an unchanged file's (kept by the poller) is recognised by pointer.
	services map[string]*serviceDoc
	slices   map[string]*sliceDoc
}

// NewNodesFileSource prepares a source for path (as NewFileSource; opts
// give the service proxy name, the node name is each view's).
func NewNodesFileSource(path string, opts watcher.Options, interval time.Duration, log zerolog.Logger) *NodesFileSource {
	opts.NodeName, opts.Zone = "", ""
	n := &NodesFileSource{Objects: watcher.NewObjects(opts, log), fs: NewFileSource(path, opts, interval, log),
		services: map[string]*serviceDoc{}, slices: map[string]*sliceDoc{}}
	n.fs.decoded = n.reload
	return n
}

// Start returns once the manifests have been read once, as FileSource.Start,
// their objects handed to notify.
func (n *NodesFileSource) Start(ctx context.Context, notify func(watcher.Event)) error {
	n.mu.Lock()
	n.notify = notify
	n.mu.Unlock()
	return n.fs.Start(ctx, func(watcher.Event) {}) // reload hands the objects over
}

// Stop ends the poller.
func (n *NodesFileSource) Stop() { n.fs.Stop() }

// reload hands over what a new read changed.
func (n *NodesFileSource) reload(ds *decodedSet) {
	n.mu.Lock()
	defer n.mu.Unlock()
	keep := func(service string) bool { return ds.findings.retain[service] }
	services := make(map[string]*serviceDoc, len(ds.services))
	for _, s := range ds.services {
		services[serviceKey(watcher.NamespaceOf(s.obj.namespace), s.obj.name)] = s.obj
	}
	slices := map[string]*sliceDoc{}
	for _, group := range ds.slicesByService {
		for _, s := range group {
			slices[serviceKey(watcher.NamespaceOf(s.obj.namespace), s.obj.name)] = s.obj
		}
	}
	for key, d := range services {
		if keep(key) || same(n.services[key], d) {
			continue
		}
		svc, err := loadService(d)
		if err != nil {
			continue // reported by the read; the previous objects stay
		}
		n.services[key] = d
		n.send(watcher.Updated, inNamespace(svc))
	}
	for key, d := range n.services {
		if _, ok := services[key]; ok || keep(key) || ds.findings.retainMissing {
			continue
		}
		delete(n.services, key)
		n.send(watcher.Deleted, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: watcher.NamespaceOf(d.namespace), Name: d.name}})
	}
	for key, d := range slices {
		if keep(serviceKey(watcher.NamespaceOf(d.namespace), d.service)) || same(n.slices[key], d) {
			continue
		}
		sl, err := loadSlice(d)
		if err != nil {
			continue
		}
		n.slices[key] = d
		n.send(watcher.Updated, inNamespace(sl))
	}
	for key, d := range n.slices {
		if _, ok := slices[key]; ok || keep(serviceKey(watcher.NamespaceOf(d.namespace), d.service)) || ds.findings.retainMissing {
			continue
		}
		delete(n.slices, key)
		n.send(watcher.Deleted, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: watcher.NamespaceOf(d.namespace), Name: d.name}})
	}
}

// same: the document handed over before (an unchanged file keeps its
// documents) or one written alike (a changed file's other documents).
func same[T any](prev, next *objectDoc[T]) bool {
	return prev == next || (prev != nil && len(prev.raw) > 0 && bytes.Equal(prev.raw, next.raw))
}

func (n *NodesFileSource) send(op watcher.Op, obj metav1.Object) {
	if n.notify == nil {
		return
	}
	kind := watcher.KindService
	if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
		kind = watcher.KindEndpointSlice
	}
	n.notify(watcher.Event{Kind: kind, Op: op, Object: obj})
}

// inNamespace is obj with the API server's default namespace when its
// manifest has none, as a node's file source keys it.
func inNamespace[T interface {
	*corev1.Service | *discoveryv1.EndpointSlice
	metav1.Object
}](obj T) T {
	if obj.GetNamespace() != "" {
		return obj
	}
	switch o := any(obj).(type) {
	case *corev1.Service:
		c := *o
		c.Namespace = watcher.NamespaceOf("")
		return any(&c).(T)
	case *discoveryv1.EndpointSlice:
		c := *o
		c.Namespace = watcher.NamespaceOf("")
		return any(&c).(T)
	}
	return obj
}
