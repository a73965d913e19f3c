package kubesource

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/kproxy/kproxy/watcher"
)

// DefaultResyncPeriod is kube-proxy's --config-sync-period default.
const DefaultResyncPeriod = 15 * time.Minute

// Options configure the Kubernetes source.
type Options struct {
	watcher.Options
	// ResyncPeriod is how often informers replay their cache (--config-sync-period).
	ResyncPeriod time.Duration
	// AllNodes watches every Node rather than Options.NodeName's only: a
	// core serving many nodes (ViewFor) needs each node's zone.
	AllNodes bool
	Log      zerolog.Logger
}

// Source watches Services, EndpointSlices and this node's Node object
// with client-go shared informers, as kube-proxy does. Its informers hand
// each object over in a watcher.Event; its View is its watcher.Objects,
// which hold what the events carried once the consumer applied them
// (Apply, which watcher.Tracker.Handle calls), and build a service from
// those.
type Source struct {
	*watcher.Objects
	opts   Options
	client kubernetes.Interface
	// One factory per kind of list options: services by label selector,
	// slices unfiltered (matched to services by kubernetes.io/service-name),
	// the node by name.
	factories                 []informers.SharedInformerFactory
	svcInf, sliceInf, nodeInf cache.SharedIndexInformer
	node                      corelisters.NodeLister
	synced                    []cache.InformerSynced
	// downSince is when the API server last stopped answering the
	// monitor's probe (unix nanoseconds), 0 while it answers.
	downSince atomic.Int64
	// stop ends what Start started, whether or not its context ended.
	stop context.CancelFunc
}

// ServiceSelector is kube-proxy's label selector for Services: without a
// service proxy name, services that name another proxy and headless ones
// are left out; with one, only services labelled with it are watched
// (KPNG's --service-proxy-name).
func ServiceSelector(serviceProxyName string) (labels.Selector, error) {
	var reqs []labels.Requirement
	if serviceProxyName == "" {
		r, err := labels.NewRequirement(watcher.LabelServiceProxyName, selection.DoesNotExist, nil)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, *r)
	} else {
		r, err := labels.NewRequirement(watcher.LabelServiceProxyName, selection.Equals, []string{serviceProxyName})
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

// New prepares informers on client; Start runs them.
func New(client kubernetes.Interface, o Options) (*Source, error) {
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
	return &Source{
		Objects:   watcher.NewObjects(o.Options, o.Log),
		opts:      o,
		client:    client,
		factories: []informers.SharedInformerFactory{svcs, slices, nodes},
		svcInf:    svcs.Core().V1().Services().Informer(),
		sliceInf:  slices.Discovery().V1().EndpointSlices().Informer(),
		nodeInf:   nodes.Core().V1().Nodes().Informer(),
		node:      nodes.Core().V1().Nodes().Lister(),
	}, nil
}

// Start registers notify on every informer, starts them, and returns once
// all caches have synced (nothing should be programmed before: a partial
// cache would delete services). notify runs on informer goroutines and
// must only hand the event on.
func (s *Source) Start(ctx context.Context, notify func(watcher.Event)) error {
	// The handlers hand each object over in its event, as kube-proxy's
	// config handlers do; the consumer applies it to the Objects.
	onService := func(op watcher.Op) func(any) {
		return func(obj any) {
			if svc, ok := unwrapDeleted(obj).(*corev1.Service); ok {
				notify(watcher.ServiceEvent(op, svc))
			}
		}
	}
	onSlice := func(op watcher.Op) func(any) {
		return func(obj any) {
			if sl, ok := unwrapDeleted(obj).(*discoveryv1.EndpointSlice); ok {
				notify(watcher.EndpointSliceEvent(op, sl))
			}
		}
	}
	onNode := func(op watcher.Op) func(any) {
		return func(obj any) {
			if n, ok := unwrapDeleted(obj).(*corev1.Node); ok {
				notify(watcher.NodeEvent(op, n))
			}
		}
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		fn  func(watcher.Op) func(any)
	}{{s.svcInf, onService}, {s.sliceInf, onSlice}, {s.nodeInf, onNode}} {
		add, updated := reg.fn(watcher.Added), reg.fn(watcher.Updated)
		update := func(_, obj any) { updated(obj) }
		if reg.inf == s.nodeInf {
			// A Node's update matters only when its zone changed
			// (kubelets update their Node's status often).
			update = func(old, obj any) {
				o, ok1 := old.(*corev1.Node)
				n, ok2 := obj.(*corev1.Node)
				if ok1 && ok2 && o.Labels[corev1.LabelTopologyZone] == n.Labels[corev1.LabelTopologyZone] {
					return
				}
				updated(obj)
			}
		}
		if _, err := reg.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    add,
			UpdateFunc: update,
			DeleteFunc: reg.fn(watcher.Deleted),
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
	ctx, s.stop = context.WithCancel(ctx)
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
func (s *Source) monitor(ctx context.Context) {
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
func (s *Source) APIDownFor() time.Duration {
	if since := s.downSince.Load(); since != 0 {
		return time.Since(time.Unix(0, since))
	}
	return 0
}

// Stop shuts the informers down (a factory's Shutdown waits for its
// informers, which end with Start's context: Stop ends it first).
func (s *Source) Stop() {
	if s.stop != nil {
		s.stop()
	}
	for _, f := range s.factories {
		f.Shutdown()
	}
}

// toBeDeletedTaint is the Cluster Autoscaler's taint on a node it is about
// to delete (kube-proxy's healthcheck.ToBeDeletedTaint).
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// NodeEligible reports whether this node should get load-balancer
// traffic, as kube-proxy's /healthz decides: not while it is being deleted
// or tainted for deletion by the Cluster Autoscaler. Unknown (not in the
// cache yet) counts as eligible, as kube-proxy starts.
func (s *Source) NodeEligible() bool {
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

func unwrapDeleted(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

var _ watcher.NodeViews = (*Source)(nil)
