package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/watcher"
)

// maxHollowServices is as many services as get a ClusterIP of their own
// in 10.96.0.0/16, 250 to a /24.
const maxHollowServices = 250 * 256

// HollowCluster makes a hollow cluster's objects, in namespace hollow:
// services svc-I, a tenth of them internalTrafficPolicy Local, each with
// one EndpointSlice of two endpoints on random nodes node-0 to node-N-1.
// Its random source is seeded, so a round's objects and churn repeat.
type HollowCluster struct {
	r     *rand.Rand
	nodes int
}

// NewHollowCluster is a cluster of nodes, its random choices drawn from seed.
func NewHollowCluster(seed uint64, nodes int) *HollowCluster {
	return &HollowCluster{r: rand.New(rand.NewPCG(seed, 1)), nodes: nodes}
}

// Pick is a random service of services, from the cluster's random source.
func (c *HollowCluster) Pick(services int) int { return c.r.IntN(services) }

// Node is node i, in one of three zones.
func (c *HollowCluster) Node(i int) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
		Labels: map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}}}
}

// Service is service i.
func (c *HollowCluster) Service(i int) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "hollow", Name: fmt.Sprintf("svc-%d", i)},
		Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if i%10 == 0 {
		svc.Spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyLocal)
	}
	return svc
}

// Slice is service i's EndpointSlice at version, its endpoints on random
// nodes, stamped with last-change-trigger-time at: the nodes measure
// change → store from it.
func (c *HollowCluster) Slice(i, version int, at time.Time) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "hollow", Name: fmt.Sprintf("svc-%d-0", i),
		Labels:      map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", i)},
		Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}}}
	for e := range 2 {
		node := fmt.Sprintf("node-%d", c.r.IntN(c.nodes))
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 1+e, (i+version)/250%250, (i+version)%250+1)},
			NodeName:   &node,
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	return sl
}

// hollowViews is the Kubernetes source's view without informers: the
// round hands the objects over as the informers would.
type hollowViews struct {
	*watcher.Objects
	mu     sync.Mutex
	notify func(watcher.Event)
}

func (v *hollowViews) Start(_ context.Context, notify func(watcher.Event)) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notify = notify
	return nil
}
func (v *hollowViews) Stop() {}

func (v *hollowViews) send(e watcher.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notify(e)
}
