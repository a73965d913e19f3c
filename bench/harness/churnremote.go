package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// remoteChurn is the churn through a core: the harness runs kproxy's core
// (actors/remote, what `kproxy watch --serve` runs) in its own process and
// feeds it each change directly, and the kproxy under test follows it with
// --source remote:ADDR, so each change reaches kproxy as the core's delta
// over protoactor remoting, with no API server or file decoding per change.
// The core's work is the harness process's.
type remoteChurn struct {
	core    *remote.Core
	views   *fedViews
	pool    []string
	addrs   []string
	tcpPort int
	ips     []string
}

func startRemoteChurn(ctx context.Context, e *env, n int) (*remoteChurn, error) {
	b := e.backends
	r := &remoteChurn{views: &fedViews{store: watcher.NewStore()}, pool: b.IPs, addrs: serviceAddrs(kproxyNet, n, ModeConn), tcpPort: b.TCPPort}
	var all []*messages.ServicePortEndpoints
	for i := range n {
		r.ips = append(r.ips, hostIP(kproxyNet, i))
		ports, err := r.build(i, r.pool[i%len(r.pool)])
		if err != nil {
			return nil, err
		}
		all = append(all, ports...)
	}
	r.views.store.Replace(all, nil, false)
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := remote.CoreConfig{Views: r.views, MinSyncPeriod: e.o.CoreMinSyncPeriod, Remote: remote.Config{Listen: addr, Log: zerolog.Nop()}, Log: zerolog.Nop()}
	if r.core, err = remote.StartCore(ctx, cfg); err != nil {
		return nil, fmt.Errorf("start the churn's core: %w", err)
	}
	return r, nil
}

// build is service i's ports with endpoint, as kproxy builds them from its
// Service and EndpointSlice (the file source's manifests, the same
// objects).
func (r *remoteChurn) build(i int, endpoint string) ([]*messages.ServicePortEndpoints, error) {
	name := serviceName(i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
		Spec: corev1.ServiceSpec{ClusterIP: r.ips[i], Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: tcpServicePort, TargetPort: intstr.FromInt32(int32(r.tcpPort))}}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(r.tcpPort))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpoint}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	ports, err := watcher.BuildServicePorts(svc, []*discoveryv1.EndpointSlice{slice}, watcher.Options{NodeName: "bench"})
	if err != nil {
		return nil, fmt.Errorf("build service %s: %w", name, err)
	}
	return ports, nil
}

func (r *remoteChurn) Name() string { return "remote" }
func (r *remoteChurn) KproxyArgs() []string {
	return []string{"--source", "remote:" + r.core.Address()}
}
func (r *remoteChurn) Addrs() []string { return r.addrs }
func (r *remoteChurn) Pool() []string  { return r.pool }

// Set hands the core service i's new ports, as a source's event would.
func (r *remoteChurn) Set(_ context.Context, i int, endpoint string) error {
	ports, err := r.build(i, endpoint)
	if err != nil {
		return err
	}
	now := time.Now()
	changed, err := r.views.store.Apply(&messages.Delta{Upserts: ports})
	if err != nil {
		return err
	}
	for _, svc := range changed {
		r.views.changed(svc, now)
		r.views.notify(watcher.Event{Kind: watcher.KindEndpointSlice, Service: svc})
	}
	return nil
}

func (r *remoteChurn) stop() { r.core.Stop() }

// fedViews is the core's source: one Store every node sees, changed by Set.
// It knows when each service last changed, as EndpointSlices' trigger
// times tell the Kubernetes source, so the core's deltas carry them and
// kproxy's network programming metric measures its own part of each
// change (from the change handed to the core to kproxy's flush).
type fedViews struct {
	store    *watcher.Store
	mu       sync.Mutex
	fn       func(watcher.Event)
	triggers map[string]time.Time
}

func (v *fedViews) changed(service string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.triggers == nil {
		v.triggers = map[string]time.Time{}
	}
	v.triggers[service] = at
}

// TriggerTime is when service last changed (zero: not since the start).
func (v *fedViews) TriggerTime(service string) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.triggers[service]
}

func (v *fedViews) Start(_ context.Context, notify func(watcher.Event)) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fn = notify
	return nil
}

func (v *fedViews) notify(e watcher.Event) {
	v.mu.Lock()
	fn := v.fn
	v.mu.Unlock()
	if fn != nil {
		fn(e)
	}
}

// Every node sees the churn's services alike (watcher.Classifier): the
// core builds each change once.
func (v *fedViews) ServiceNames() []string         { return v.store.ServiceNames() }
func (v *fedViews) Classes(string) watcher.Classes { return watcher.Classes{} }
func (v *fedViews) Zone(string) string             { return "" }
func (v *fedViews) Stop()                          {}
func (v *fedViews) ViewFor(string) watcher.View    { return timedStore{v.store, v} }

// timedStore is the store with the churn's trigger times, which the
// core's trackers hand on with each change (watcher.TriggerTimer).
type timedStore struct {
	*watcher.Store
	v *fedViews
}

func (t timedStore) TriggerTime(service string) time.Time { return t.v.TriggerTime(service) }
