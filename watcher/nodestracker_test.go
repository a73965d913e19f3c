package watcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/messages"
)

// objectViews is Objects as a core's NodeViews, fed by the test.
type objectViews struct{ *Objects }

func (objectViews) Start(context.Context, func(Event)) error { return nil }
func (objectViews) Stop()                                    {}

// randomCluster makes random Services, EndpointSlices and Nodes: traffic
// policies, node ports, trafficDistribution, zone and node hints,
// ready, serving and terminating endpoints, nodes with and without zones.
type randomCluster struct {
	r     *rand.Rand
	nodes []string
}

func (c *randomCluster) node() string { return c.nodes[c.r.IntN(len(c.nodes))] }

func (c *randomCluster) nodeObject(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if z := c.r.IntN(4); z > 0 {
		n.Labels[corev1.LabelTopologyZone] = fmt.Sprintf("z%d", z)
	}
	return n
}

func (c *randomCluster) service(i int) *corev1.Service {
	r := c.r
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)},
		Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.0.%d", i+1), Type: corev1.ServiceTypeClusterIP}}
	svc.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("a")}}
	if r.IntN(2) == 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "b", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)})
	}
	if r.IntN(3) == 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = int32(30000 + i)
		if r.IntN(2) == 0 {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
	}
	if r.IntN(4) == 0 {
		svc.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
	}
	if r.IntN(4) == 0 {
		svc.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferClose)
	}
	if r.IntN(5) == 0 {
		svc.Annotations = map[string]string{PreserveSourceIPAnnotation: "true"}
	}
	return svc
}

func (c *randomCluster) slice(svc, name string) *discoveryv1.EndpointSlice {
	r := c.r
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr("a"), Port: ptr[int32](8080), Protocol: ptr(corev1.ProtocolTCP)},
			{Name: ptr("b"), Port: ptr[int32](5353), Protocol: ptr(corev1.ProtocolUDP)}}}
	zoneHints, nodeHints := r.IntN(3) == 0, r.IntN(4) == 0
	for range r.IntN(5) {
		e := discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", r.IntN(4), r.IntN(250)+1)}}
		if r.IntN(5) > 0 {
			e.NodeName = ptr(c.node())
		}
		if r.IntN(3) > 0 {
			e.Zone = ptr(fmt.Sprintf("z%d", r.IntN(3)+1))
		}
		e.Conditions = []discoveryv1.EndpointConditions{
			{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)},
			{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)},
			{},
		}[r.IntN(4)]
		if zoneHints || nodeHints {
			e.Hints = &discoveryv1.EndpointHints{}
			if zoneHints && r.IntN(6) > 0 {
				e.Hints.ForZones = []discoveryv1.ForZone{{Name: fmt.Sprintf("z%d", r.IntN(3)+1)}}
			}
			if nodeHints && r.IntN(6) > 0 {
				e.Hints.ForNodes = []discoveryv1.ForNode{{Name: c.node()}}
			}
		}
		sl.Endpoints = append(sl.Endpoints, e)
	}
	return sl
}

// event is one random change to the cluster.
func (c *randomCluster) event() Event {
	r := c.r
	switch k := r.IntN(10); {
	case k < 2:
		op := Updated
		if r.IntN(6) == 0 {
			op = Deleted
		}
		return Event{Kind: KindService, Op: op, Object: c.service(r.IntN(6))}
	case k < 9:
		op := Updated
		if r.IntN(6) == 0 {
			op = Deleted
		}
		svc := fmt.Sprintf("s%d", r.IntN(6))
		return Event{Kind: KindEndpointSlice, Op: op, Object: c.slice(svc, fmt.Sprintf("%s-%d", svc, r.IntN(2)))}
	default:
		return NodeEvent(Updated, c.nodeObject(c.node()))
	}
}

// hollowMember is a member as a backend holds it: a Store the pieces and
// snapshots are applied to.
type hollowMember struct {
	id, node string
	store    *Store
	// compact: it takes endpoint updates (Piece.Compact), as a backend
	// that says so in its Subscribe.
	compact bool
}

func (m *hollowMember) apply(t *testing.T, p *Piece) {
	t.Helper()
	upserts, updates := p.Upserts, []*messages.EndpointsUpdate(nil)
	if m.compact {
		upserts, updates = p.Compact()
	}
	if _, err := m.store.Apply(&messages.Delta{Upserts: upserts, Deletes: p.Deletes, EndpointUpdates: updates}); err != nil {
		t.Fatalf("member %s: %v", m.id, err)
	}
}

func (m *hollowMember) snapshot(views []*ClassView) {
	var all []*messages.ServicePortEndpoints
	for _, v := range views {
		all = append(all, v.Ports...)
	}
	m.store.Replace(all, nil, false)
}

// TestNodesTrackerEqualsEachNodesOwnView runs random clusters through a
// NodesTracker with members joining, leaving, lagging and catching up,
// and after every paced flush compares each member's state with the view
// its node builds on its own from the same events (a node proxy's
// Objects and Tracker, as kproxy on a node without a core).
func TestNodesTrackerEqualsEachNodesOwnView(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { nodesTrackerRound(t, seed) })
	}
}

func nodesTrackerRound(t *testing.T, seed uint64) {
	c := &randomCluster{r: rand.New(rand.NewPCG(seed, 7)), nodes: []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6"}}
	log := zerolog.Nop()
	core := NewObjects(Options{}, log)
	own := map[string]*Objects{}
	for _, n := range c.nodes {
		own[n] = NewObjects(Options{NodeName: n}, log)
	}
	apply := func(e Event) []string {
		for _, o := range own {
			o.Apply(e)
		}
		return core.Apply(e)
	}
	for _, n := range c.nodes {
		apply(NodeEvent(Added, c.nodeObject(n)))
	}
	for i := range 6 {
		apply(Event{Kind: KindService, Op: Added, Object: c.service(i)})
		apply(Event{Kind: KindEndpointSlice, Op: Added, Object: c.slice(fmt.Sprintf("s%d", i), fmt.Sprintf("s%d-0", i))})
	}
	tr := NewNodesTracker(objectViews{core})
	members := map[string]*hollowMember{}
	lagging := map[string]bool{}
	join := func() {
		m := &hollowMember{id: fmt.Sprintf("m%d", c.r.IntN(1000)), node: c.node(), store: NewStore(), compact: c.r.IntN(2) == 0}
		if members[m.id] != nil {
			return
		}
		members[m.id] = m
		m.snapshot(tr.Add(m.id, m.node))
	}
	for range 4 {
		join()
	}
	deliver := func(f Flushed) {
		for id, pieces := range f.Members {
			m := members[id]
			if m == nil {
				t.Fatalf("pieces for member %s, which is not one", id)
			}
			for _, p := range pieces {
				m.apply(t, p)
			}
			if got, holds := tr.Ports(id), len(m.store.All()); got != holds {
				t.Fatalf("member %s counted %d service ports, holds %d", id, got, holds)
			}
		}
	}
	for step := range 300 {
		for id, m := range members {
			if got, holds := tr.Ports(id), len(m.store.All()); got != holds {
				t.Fatalf("step %d: member %s counted %d service ports, holds %d", step, id, got, holds)
			}
		}
		switch k := c.r.IntN(20); {
		case k < 12:
			e := c.event()
			if c.r.IntN(40) == 0 {
				tr.Mark("") // a full resync
			}
			for _, svc := range apply(e) {
				if svc == "" && e.Node != "" {
					tr.MarkNode(e.Node)
				} else {
					tr.Mark(svc)
				}
			}
		case k < 14:
			deliver(tr.Flush(true, func(id string) bool { return lagging[id] }))
		case k == 14:
			join()
		case k == 15 && len(members) > 1:
			for id := range members {
				tr.Remove(id)
				delete(members, id)
				delete(lagging, id)
				break
			}
		case k == 16:
			for id := range members {
				lagging[id] = !lagging[id]
				break
			}
		case k == 17:
			// A slow member catching up gets what it missed, at once,
			// or (a new session) a snapshot.
			for id, m := range members {
				if c.r.IntN(2) == 0 {
					for _, p := range tr.FlushOwed(id) {
						m.apply(t, p)
					}
				} else {
					m.snapshot(tr.Snapshot(id))
				}
				delete(lagging, id)
				if got, holds := tr.Ports(id), len(m.store.All()); got != holds {
					t.Fatalf("member %s counted %d service ports after catching up, holds %d", id, got, holds)
				}
				break
			}
		default:
			clear(lagging)
			deliver(tr.Flush(false, nil))
			if tr.Pending() {
				t.Fatalf("step %d: work left after a paced flush of every member", step)
			}
			for _, m := range members {
				want := ownView(t, own[m.node])
				if diff := diffPorts(want, m.store.All()); diff != "" {
					t.Fatalf("step %d: member %s on %s differs from its node's own view:\n%s", step, m.id, m.node, diff)
				}
				if got := tr.Ports(m.id); got != len(want) {
					t.Fatalf("step %d: member %s counted %d service ports, holds %d", step, m.id, got, len(want))
				}
			}
		}
	}
}

// ownView is what a node builds on its own: every service of its Objects.
func ownView(t *testing.T, o *Objects) []*messages.ServicePortEndpoints {
	t.Helper()
	var out []*messages.ServicePortEndpoints
	for _, svc := range o.ServiceNames() {
		ports, err := o.Build(svc)
		if err != nil {
			t.Fatalf("build %s: %v", svc, err)
		}
		out = append(out, diffService(nil, ports).next...)
	}
	slices.SortFunc(out, func(a, b *messages.ServicePortEndpoints) int {
		return strings.Compare(a.GetServicePort().GetKey().ID(), b.GetServicePort().GetKey().ID())
	})
	return out
}

func diffPorts(want, got []*messages.ServicePortEndpoints) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		var w, g *messages.ServicePortEndpoints
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if !proto.Equal(w, g) {
			fmt.Fprintf(&b, "want %v\n got %v\n", w, g)
		}
	}
	return b.String()
}

// TestNodesTrackerBuildsOncePerClass: a change to a service seen alike by
// every node is built once, and every member gets the same piece; a node
// hosting an endpoint gets its own.
func TestNodesTrackerBuildsOncePerClass(t *testing.T) {
	log := zerolog.Nop()
	core := NewObjects(Options{}, log)
	counted := &countingViews{objectViews: objectViews{core}}
	core.Apply(Event{Op: Added, Object: newService()})
	core.Apply(Event{Op: Added, Object: newSlice("web-1", newEndpoint("10.1.0.1", "n1", readyEP))})
	tr := NewNodesTracker(counted)
	for i := range 50 {
		tr.Add(fmt.Sprint(i), fmt.Sprintf("n%d", i))
	}
	if counted.builds != 2 {
		t.Fatalf("50 members' snapshots built the service %d times, want 2 (n1's view and everyone else's)", counted.builds)
	}
	counted.builds = 0
	for _, svc := range core.Apply(Event{Op: Updated, Object: newSlice("web-1", newEndpoint("10.1.0.1", "n1", readyEP),
		newEndpoint("10.1.0.2", "n2", readyEP))}) {
		tr.Mark(svc)
	}
	f := tr.Flush(true, nil)
	if counted.builds != 3 {
		t.Fatalf("one change built %d times, want 3 (n1's, n2's, everyone else's)", counted.builds)
	}
	shared := f.Members["0"][0]
	for id, pieces := range f.Members {
		if len(pieces) != 1 {
			t.Fatalf("member %s got %d pieces, want 1", id, len(pieces))
		}
		if own := id == "1" || id == "2"; (pieces[0] == shared) == own {
			t.Fatalf("member %s: shares the common piece: %v, want %v", id, pieces[0] == shared, !own)
		}
	}
	if len(f.Members) != 50 {
		t.Fatalf("%d members got the change, want 50", len(f.Members))
	}
}

// TestNodesTrackerKeepsRejectedService: an invalid update leaves every
// member with what it held, reported once.
func TestNodesTrackerKeepsRejectedService(t *testing.T) {
	core := NewObjects(Options{}, zerolog.Nop())
	core.Apply(Event{Op: Added, Object: newService()})
	core.Apply(Event{Op: Added, Object: newSlice("web-1", newEndpoint("10.1.0.1", "n1", readyEP))})
	tr := NewNodesTracker(objectViews{core})
	tr.Add("a", "n1")
	tr.Add("b", "n2")
	bad := newService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 })
	for _, svc := range core.Apply(Event{Op: Updated, Object: bad}) {
		tr.Mark(svc)
	}
	f := tr.Flush(false, nil)
	if len(f.Errors) != 1 || len(f.Members) != 0 {
		t.Fatalf("flush of a rejected service: %d errors, %d members changed; want 1 and 0", len(f.Errors), len(f.Members))
	}
	if tr.Ports("a") != 1 || tr.Ports("b") != 1 {
		t.Fatalf("members hold %d and %d service ports after a rejected update, want 1 and 1", tr.Ports("a"), tr.Ports("b"))
	}
}

type countingViews struct {
	objectViews
	builds int
}

func (c *countingViews) ViewFor(node string) View { return countingView{c, c.Objects.ViewFor(node)} }

type countingView struct {
	c *countingViews
	View
}

func (v countingView) Build(svc string) ([]*messages.ServicePortEndpoints, error) {
	v.c.builds++
	return v.View.Build(svc)
}
