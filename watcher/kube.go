package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kproxy/kproxy/messages"
)

// DefaultResyncPeriod is kube-proxy's --config-sync-period default.
const DefaultResyncPeriod = 15 * time.Minute

// KubeOptions configure the Kubernetes source.
type KubeOptions struct {
	Options
	// ResyncPeriod is how often informers replay their cache (--config-sync-period).
	ResyncPeriod time.Duration
	// AllNodes watches every Node rather than Options.NodeName's only: a
	// core serving many nodes (ViewFor) needs each node's zone.
	AllNodes bool
	Log      zerolog.Logger
}

// KubeSource watches Services, EndpointSlices and this node's Node object
// with client-go shared informers, as kube-proxy does, and builds the
// node-local view of one service at a time from the informer caches.
type KubeSource struct {
	opts   KubeOptions
	client kubernetes.Interface
	// One factory per kind of list options: services by label selector,
	// slices unfiltered (matched to services by kubernetes.io/service-name),
	// the node by name.
	factories                 []informers.SharedInformerFactory
	svcInf, sliceInf, nodeInf cache.SharedIndexInformer
	services                  corelisters.ServiceLister
	node                      corelisters.NodeLister
	synced                    []cache.InformerSynced
	// downSince is when the API server last stopped answering the
	// monitor's probe (unix nanoseconds), 0 while it answers.
	downSince atomic.Int64
	// created: trigger times before it are not this process's to
	// observe (kube-proxy's EndpointsChangeTracker.trackerStartTime).
	created time.Time
}

// ServiceSelector is kube-proxy's label selector for Services: without a
// service proxy name, services that name another proxy and headless ones
// are left out; with one, only services labelled with it are watched
// (KPNG's --service-proxy-name).
func ServiceSelector(serviceProxyName string) (labels.Selector, error) {
	var reqs []labels.Requirement
	if serviceProxyName == "" {
		r, err := labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, *r)
	} else {
		r, err := labels.NewRequirement(LabelServiceProxyName, selection.Equals, []string{serviceProxyName})
		if err != nil {
			return nil, fmt.Errorf("--service-proxy-name %q: %w", serviceProxyName, err)
		}
		reqs = append(reqs, *r)
	}
	r, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(append(reqs, *r)...), nil
}

// NewKubeSource prepares informers on client; Start runs them.
func NewKubeSource(client kubernetes.Interface, o KubeOptions) (*KubeSource, error) {
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.TopologyLog == nil {
		o.TopologyLog = &o.Log
	}
	sel, err := ServiceSelector(o.ServiceProxyName)
	if err != nil {
		return nil, err
	}
	svcs := informers.NewSharedInformerFactoryWithOptions(client, o.ResyncPeriod,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sel.String() }))
	slices := informers.NewSharedInformerFactoryWithOptions(client, o.ResyncPeriod)
	nodes := informers.NewSharedInformerFactoryWithOptions(client, o.ResyncPeriod,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			if !o.AllNodes {
				lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.NodeName).String()
			}
		}))
	sliceInf := slices.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{sliceServiceIndex: sliceService}); err != nil {
		return nil, fmt.Errorf("index EndpointSlices by service: %w", err)
	}
	return &KubeSource{
		created:   time.Now(),
		opts:      o,
		client:    client,
		factories: []informers.SharedInformerFactory{svcs, slices, nodes},
		svcInf:    svcs.Core().V1().Services().Informer(),
		sliceInf:  sliceInf,
		nodeInf:   nodes.Core().V1().Nodes().Informer(),
		services:  svcs.Core().V1().Services().Lister(),
		node:      nodes.Core().V1().Nodes().Lister(),
	}, nil
}

// Event names what changed: a service ("namespace/name"), or every service
// when Service is empty (this node's zone changed).
type Event struct {
	Kind    string // Service, EndpointSlice, Node or File
	Service string
	// Node is the node whose view changed, for a source serving many
	// nodes (NodeViews); empty means every node's.
	Node string
}

// Start registers notify on every informer, starts them, and returns once
// all caches have synced (nothing should be programmed before: a partial
// cache would delete services). notify runs on informer goroutines and
// must only hand the event on.
func (s *KubeSource) Start(ctx context.Context, notify func(Event)) error {
	onService := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			if svc, ok := obj.(*corev1.Service); ok {
				for _, err := range SourceRangeErrors(svc) {
					s.opts.Log.Error().Err(err).Str("service", key).Msg("Invalid CIDR ignored")
				}
				for _, err := range AnnotationErrors(svc) {
					s.opts.Log.Error().Err(err).Str("service", key).Msg("annotation ignored")
				}
			}
			notify(Event{Kind: "Service", Service: key})
		}
	}
	onSlice := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if sl, ok := obj.(*discoveryv1.EndpointSlice); ok {
			if name := sl.Labels[discoveryv1.LabelServiceName]; name != "" {
				notify(Event{Kind: "EndpointSlice", Service: sl.Namespace + "/" + name})
			}
		}
	}
	onNode := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		e := Event{Kind: "Node"}
		if n, ok := obj.(*corev1.Node); ok {
			e.Node = n.Name
		}
		notify(e)
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
	}{{s.svcInf, onService}, {s.sliceInf, onSlice}, {s.nodeInf, onNode}} {
		fn := reg.fn
		update := func(_, obj any) { fn(obj) }
		if reg.inf == s.nodeInf && s.opts.AllNodes {
			// Serving every node, a Node's update matters only when its
			// zone changed (kubelets update their Node's status often).
			update = func(old, obj any) {
				o, ok1 := old.(*corev1.Node)
				n, ok2 := obj.(*corev1.Node)
				if ok1 && ok2 && o.Labels[corev1.LabelTopologyZone] == n.Labels[corev1.LabelTopologyZone] {
					return
				}
				fn(obj)
			}
		}
		if _, err := reg.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: update,
			DeleteFunc: fn,
		}); err != nil {
			return fmt.Errorf("register informer handler: %w", err)
		}
		// Informers retry by themselves with backoff; log the outage so an
		// operator sees it, and keep serving what we have.
		inf := reg.inf
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			s.opts.Log.Warn().Err(err).Msg("watch of the API server failed; serving the last known state, retrying")
		}); err != nil {
			return fmt.Errorf("set watch error handler: %w", err)
		}
		s.synced = append(s.synced, inf.HasSynced)
	}
	// The probe runs from the start: an APIGate closed by a failed
	// first list opens only when the probe gets an answer.
	go s.monitor(ctx)
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return errors.New("informer caches did not sync")
	}
	return nil
}

// apiServerCheckInterval is how often the source checks that the API
// server answers: to log an outage (informers retry silently), and, with
// an APIGate on the client, to let the informers resume within this long
// of the API server's return.
const apiServerCheckInterval = 2 * time.Second

// monitor logs when the API server stops and starts answering. Its probe
// also drives the client's APIGate (see there), which holds the informers'
// requests during an outage so that they resume as soon as it ends.
func (s *KubeSource) monitor(ctx context.Context) {
	t := time.NewTicker(apiServerCheckInterval)
	defer t.Stop()
	var downSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, apiServerCheckInterval)
		err := s.client.Discovery().RESTClient().Get().AbsPath("/livez").Do(probeContext(cctx)).Error()
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && downSince.IsZero():
			downSince = time.Now()
			s.downSince.Store(downSince.UnixNano())
			s.opts.Log.Warn().Err(err).Msg("API server unreachable; serving the last known state until it returns")
		case err == nil && !downSince.IsZero():
			s.opts.Log.Info().Dur("outage", time.Since(downSince).Round(time.Millisecond)).Msg("API server reachable again; changes made meanwhile arrive as informers resume")
			downSince = time.Time{}
			s.downSince.Store(0)
		}
	}
}

// APIDownFor is how long the API server has not answered the source's
// probe (checked every apiServerCheckInterval), 0 while it answers.
func (s *KubeSource) APIDownFor() time.Duration {
	if since := s.downSince.Load(); since != 0 {
		return time.Since(time.Unix(0, since))
	}
	return 0
}

// Stop shuts the informers down.
func (s *KubeSource) Stop() {
	for _, f := range s.factories {
		f.Shutdown()
	}
}

// Zone is this node's topology zone from its Node object ("" if unknown).
func (s *KubeSource) Zone() string { return s.zoneOf(s.opts.NodeName) }

// TriggerTime is the latest endpoints.kubernetes.io/last-change-trigger-time
// of the service's EndpointSlices (zero when none has one): when the
// change that the slices now reflect happened (a pod became ready, ...),
// for kubeproxy_network_programming_duration_seconds. Zero too when it is
// from before the source was created.
func (s *KubeSource) TriggerTime(service string) time.Time {
	ns, name, err := cache.SplitMetaNamespaceKey(service)
	if err != nil {
		return time.Time{}
	}
	sls, err := s.slicesOf(ns, name)
	if err != nil {
		return time.Time{}
	}
	var latest time.Time
	for _, sl := range sls {
		if t, err := time.Parse(time.RFC3339Nano, sl.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil && t.After(latest) {
			latest = t
		}
	}
	if !latest.After(s.created) {
		// A change made before this process watched (the initial list
		// has every slice's last one) is not a programming latency: as
		// kube-proxy, it is not observed.
		return time.Time{}
	}
	return latest
}

// sliceServiceIndex indexes EndpointSlices by "namespace/service" (their
// kubernetes.io/service-name label). Listing a namespace's slices with a
// label selector matches every slice of the namespace against each changed
// service, which is costly under churn with thousands of services.
const sliceServiceIndex = "service"

func sliceService(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + name}, nil
}

// slicesOf returns the service's EndpointSlices from the index.
func (s *KubeSource) slicesOf(namespace, service string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := s.sliceInf.GetIndexer().ByIndex(sliceServiceIndex, namespace+"/"+service)
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, sl)
		}
	}
	return out, nil
}

// toBeDeletedTaint is the Cluster Autoscaler's taint on a node it is about
// to delete (kube-proxy's healthcheck.ToBeDeletedTaint).
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// NodeEligible reports whether this node should get load-balancer
// traffic, as kube-proxy's /healthz decides: not while it is being deleted
// or tainted for deletion by the Cluster Autoscaler. Unknown (not in the
// cache yet) counts as eligible, as kube-proxy starts.
func (s *KubeSource) NodeEligible() bool {
	n, err := s.node.Get(s.opts.NodeName)
	if err != nil {
		return true
	}
	if n.DeletionTimestamp != nil {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return false
		}
	}
	return true
}

// ServiceNames lists every service in the cache as "namespace/name".
func (s *KubeSource) ServiceNames() []string {
	svcs, _ := s.services.List(labels.Everything())
	out := make([]string, 0, len(svcs))
	for _, svc := range svcs {
		out = append(out, svc.Namespace+"/"+svc.Name)
	}
	slices.Sort(out)
	return out
}

// Build returns the node-local view of one service from the caches: none
// when it is gone or skipped, an error when it is invalid.
func (s *KubeSource) Build(service string) ([]*messages.ServicePortEndpoints, error) {
	opts := s.opts.Options
	opts.Zone = s.Zone()
	return s.build(service, opts)
}

// build is Build for the node opts names.
func (s *KubeSource) build(service string, opts Options) ([]*messages.ServicePortEndpoints, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(service)
	if err != nil {
		return nil, err
	}
	svc, err := s.services.Services(ns).Get(name)
	if err != nil {
		return nil, nil // deleted (or filtered out by the selector)
	}
	sls, err := s.slicesOf(ns, name)
	if err != nil {
		return nil, err
	}
	ports, err := BuildServicePorts(svc, sls, opts)
	if err != nil {
		return nil, fmt.Errorf("Service %s: %w", service, err)
	}
	return ports, nil
}
