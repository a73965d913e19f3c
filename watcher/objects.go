package watcher

import (
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kproxy/kproxy/messages"
)

// Objects is the Kubernetes source's view: the Services, EndpointSlices and
// Nodes its events handed over (kube-proxy keeps the same in its change
// trackers and EndpointSliceCache). Each object is checked once, when its
// event is applied; Build then translates a service from what is held.
// Only the consumer's goroutine touches it: the informers only send events.
type Objects struct {
	opts Options // this node's; NodeName and Zone are per view (ViewFor)
	log  zerolog.Logger
	// services holds, by "namespace/name", a service and its slices; a
	// slice may come before its Service.
	services map[string]*serviceObjects
	// sliceOwner is, by slice "namespace/name", the service it serves: a
	// slice relabelled to another service leaves the first one.
	sliceOwner map[string]string
	zones      map[string]string // node -> topology.kubernetes.io/zone
	// created: trigger times before it are not this process's to observe
	// (kube-proxy's EndpointsChangeTracker.trackerStartTime).
	created time.Time
}

type serviceObjects struct {
	svc *corev1.Service
	// skip: svc is not this proxy's (Skip). invalid is validateService's
	// verdict on it. Both are made when it arrived, and so are ports, its
	// definition, which every node's build shares.
	skip    bool
	invalid error
	ports   []portDefinition
	slices  map[string]*discoveryv1.EndpointSlice // by name
	// own is slicesOf(slices), made by the first build after a slice or
	// the Service changed (nil until then).
	own []*discoveryv1.EndpointSlice
}

// NewObjects returns an empty view for the node opts names.
func NewObjects(opts Options, log zerolog.Logger) *Objects {
	return &Objects{opts: opts, log: log, services: map[string]*serviceObjects{}, sliceOwner: map[string]string{},
		zones: map[string]string{}, created: time.Now()}
}

// Apply takes e's object and returns the services whose view it changed
// ("" for every service, a Node's zone changed; none when nothing did).
func (o *Objects) Apply(e Event) []string {
	switch obj := e.Object.(type) {
	case *corev1.Service:
		return o.applyService(e.Op, obj)
	case *discoveryv1.EndpointSlice:
		return o.applySlice(e.Op, obj)
	case *corev1.Node:
		return o.applyNode(e.Op, obj)
	}
	return nil
}

func (o *Objects) applyService(op Op, svc *corev1.Service) []string {
	key := svc.Namespace + "/" + svc.Name
	so := o.services[key]
	if op == Deleted {
		if so != nil {
			so.svc, so.skip, so.invalid, so.ports, so.own = nil, false, nil, nil, nil
			o.forget(key, so)
		}
		return []string{key}
	}
	if so == nil {
		so = &serviceObjects{}
		o.services[key] = so
	}
	so.svc, so.skip, so.invalid, so.ports, so.own = svc, false, nil, nil, nil
	if _, so.skip = Skip(svc, o.opts); so.skip {
		return []string{key}
	}
	if err := validateService(svc); err != nil {
		so.invalid = fmt.Errorf("Service %s: %w", key, err)
		return []string{key}
	}
	so.ports = definePorts(svc, o.opts)
	for _, err := range SourceRangeErrors(svc) {
		o.log.Error().Err(err).Str("service", key).Msg("Invalid CIDR ignored")
	}
	for _, err := range AnnotationErrors(svc) {
		o.log.Error().Err(err).Str("service", key).Msg("annotation ignored")
	}
	return []string{key}
}

func (o *Objects) applySlice(op Op, sl *discoveryv1.EndpointSlice) []string {
	sliceKey := sl.Namespace + "/" + sl.Name
	var changed []string
	if prev, ok := o.sliceOwner[sliceKey]; ok {
		// Out of its previous service first: deleted, or relabelled.
		if so := o.services[prev]; so != nil {
			delete(so.slices, sl.Name)
			so.own = nil
			o.forget(prev, so)
		}
		delete(o.sliceOwner, sliceKey)
		changed = append(changed, prev)
	}
	key := sliceServiceKey(sl)
	if op == Deleted || key == "" {
		return changed
	}
	so := o.services[key]
	if so == nil {
		so = &serviceObjects{}
		o.services[key] = so
	}
	if so.slices == nil {
		so.slices = map[string]*discoveryv1.EndpointSlice{}
	}
	so.slices[sl.Name] = sl
	so.own = nil
	o.sliceOwner[sliceKey] = key
	if !slices.Contains(changed, key) {
		changed = append(changed, key)
	}
	return changed
}

func (o *Objects) applyNode(op Op, n *corev1.Node) []string {
	zone, had := o.zones[n.Name]
	if op == Deleted {
		delete(o.zones, n.Name)
		if !had || zone == "" {
			return nil
		}
		return []string{""}
	}
	next := n.Labels[corev1.LabelTopologyZone]
	o.zones[n.Name] = next
	if next == zone {
		return nil // kubelets update their Node's status often; only the zone matters here
	}
	return []string{""}
}

// forget drops a service's entry once it holds nothing.
func (o *Objects) forget(key string, so *serviceObjects) {
	if so.svc == nil && len(so.slices) == 0 {
		delete(o.services, key)
	}
}

// ServiceNames implements View: every service held, sorted.
func (o *Objects) ServiceNames() []string {
	out := make([]string, 0, len(o.services))
	for key, so := range o.services {
		if so.svc != nil {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// Build implements View for this node.
func (o *Objects) Build(service string) ([]*messages.ServicePortEndpoints, error) {
	return o.build(service, o.opts.NodeName)
}

// build is service's node-local view for node: none when the service is
// gone or not this proxy's, its arrival's verdict when it is invalid. Only
// the endpoints are built: the definition was made when the Service came.
func (o *Objects) build(service, node string) ([]*messages.ServicePortEndpoints, error) {
	so := o.services[service]
	if so == nil || so.svc == nil || so.skip {
		return nil, nil
	}
	if so.invalid != nil {
		return nil, so.invalid
	}
	if so.own == nil && len(so.slices) > 0 {
		sls := make([]*discoveryv1.EndpointSlice, 0, len(so.slices))
		for _, sl := range so.slices {
			sls = append(sls, sl)
		}
		so.own = slicesOf(so.svc, sls, o.opts)
	}
	opts := o.opts
	opts.NodeName, opts.Zone = node, o.zones[node]
	return withEndpoints(so.ports, so.own, opts), nil
}

// TriggerTime implements TriggerTimer: the latest
// endpoints.kubernetes.io/last-change-trigger-time of the service's
// EndpointSlices, when the change they now reflect happened (a pod became
// ready, ...), for kubeproxy_network_programming_duration_seconds. Zero
// when none has one, or when it is from before the view was created.
func (o *Objects) TriggerTime(service string) time.Time {
	so := o.services[service]
	if so == nil {
		return time.Time{}
	}
	var latest time.Time
	for _, sl := range so.slices {
		if t, err := time.Parse(time.RFC3339Nano, sl.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil && t.After(latest) {
			latest = t
		}
	}
	if !latest.After(o.created) {
		// A change made before this process watched (the initial list
		// has every slice's last one) is not a programming latency: as
		// kube-proxy, it is not observed.
		return time.Time{}
	}
	return latest
}

// ViewFor is node's view of the same objects, for a core serving many
// nodes (the source must watch every Node: kubesource.Options.AllNodes). Events
// are applied to o, once, not to the views.
func (o *Objects) ViewFor(node string) View { return nodeObjects{o: o, node: node} }

type nodeObjects struct {
	o    *Objects
	node string
}

func (v nodeObjects) ServiceNames() []string { return v.o.ServiceNames() }
func (v nodeObjects) Build(service string) ([]*messages.ServicePortEndpoints, error) {
	return v.o.build(service, v.node)
}

// TriggerTime is the objects' (TriggerTimer): the slices are every node's.
func (v nodeObjects) TriggerTime(service string) time.Time { return v.o.TriggerTime(service) }
