package main

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/kubetest"
	"github.com/kproxy/kproxy/watcher"
)

// kubeObjects creates and changes objects as a controller would.
type kubeObjects struct {
	t  *testing.T
	c  kubernetes.Interface
	ns string
}

// node creates a Node in zone (its topology.kubernetes.io/zone label).
func (k kubeObjects) node(name, zone string) {
	k.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
	if _, err := k.c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func (k kubeObjects) service(name string, port int32, target intstr.IntOrString, mutate func(*corev1.Service)) *corev1.Service {
	k.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: port, TargetPort: target}}},
	}
	if mutate != nil {
		mutate(svc)
	}
	out, err := k.c.CoreV1().Services(k.ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("create service %s: %v", name, err)
	}
	return out
}

type ep struct {
	ip                          string
	ready, serving, terminating *bool
}

func readyEP(ip string) ep { return ep{ip: ip} }

func (k kubeObjects) slice(svc, name string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "kproxy-tests"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}})
	}
	return s
}

func (k kubeObjects) apply(s *discoveryv1.EndpointSlice) {
	k.t.Helper()
	ctx := context.Background()
	cur, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Get(ctx, s.Name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err = k.c.DiscoveryV1().EndpointSlices(k.ns).Update(ctx, s, metav1.UpdateOptions{})
	} else {
		_, err = k.c.DiscoveryV1().EndpointSlices(k.ns).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		k.t.Fatalf("apply slice %s: %v", s.Name, err)
	}
}

func (k kubeObjects) deleteSlice(name string) {
	k.t.Helper()
	if err := k.c.DiscoveryV1().EndpointSlices(k.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		k.t.Fatalf("delete slice %s: %v", name, err)
	}
}

// kubeBackends starts TCP backends in a namespace the test owns, one per
// address, all on one port (a slice's port is shared by its endpoints).
func kubeBackends(t *testing.T, bn *kubetest.BackendNet, port int, ips ...netip.Addr) {
	t.Helper()
	for _, ip := range ips {
		addr := netip.AddrPortFrom(ip, uint16(port)).String()
		var b *backends.TCP
		if err := bn.Do(func() (err error) { b, err = backends.StartTCP(addr, addr); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
	}
}

func startKubeKproxy(t *testing.T, s *kubetest.Server, mutate func(*runOptions)) *instance {
	return startKproxyWith(t, "", func(o *runOptions) {
		o.source, o.kubeconfig = "kube", s.KproxyKubeconfig
		o.minSyncPeriod = 20 * time.Millisecond
		if mutate != nil {
			mutate(o)
		}
	})
}

// endpointsAre waits until id's endpoints are exactly addrs ("ip:port").
func (in *instance) endpointsAre(t *testing.T, id string, addrs ...string) {
	t.Helper()
	in.waitFor(t, fmt.Sprintf("%s endpoints %v", id, addrs), func(m map[string]*messages.ServicePortState) bool {
		st := m[id]
		if st == nil || st.GetDeleted() || len(st.GetListenAddresses()) < 1 || len(st.GetEndpoints()) != len(addrs) {
			return false
		}
		for i, e := range st.GetEndpoints() {
			if e.Address() != addrs[i] {
				return false
			}
		}
		return true
	})
}

// reached dials addr n times and returns the set of backends that answered.
func reached(t *testing.T, addr string, n int) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for range n {
		seen[readName(t, addr)] = true
	}
	return seen
}

func TestKubeSourceFollowsServicesAndSlices(t *testing.T) {
	s := kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	var ips []netip.Addr
	var addrs []string
	for range 4 {
		ip := bn.AddIP(t)
		ips = append(ips, ip)
		addrs = append(addrs, netip.AddrPortFrom(ip, 8080).String())
	}
	kubeBackends(t, bn, 8080, ips...)
	kubeBackends(t, bn, 9090, ips[0])
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}

	web := k.service("web", 18080, intstr.FromString("tcp"), nil)
	other := k.service("other", 18081, intstr.FromInt32(8080), nil)
	k.apply(k.slice("web", "web-a", 8080, readyEP(ips[0].String())))
	k.apply(k.slice("other", "other-a", 8080, readyEP(ips[3].String())))

	in := startKubeKproxy(t, s, nil)
	webAddr := web.Spec.ClusterIP + ":18080"
	in.endpointsAre(t, "default/web:tcp/TCP", addrs[0])
	in.endpointsAre(t, "default/other:tcp/TCP", addrs[3])
	if got := readName(t, webAddr); got != addrs[0] {
		t.Fatalf("web reached %s", got)
	}
	otherGen := in.latestGeneration("default/other:tcp/TCP")

	t.Run("scale up and down", func(t *testing.T) {
		k.apply(k.slice("web", "web-a", 8080, readyEP(ips[0].String()), readyEP(ips[1].String()), readyEP(ips[2].String())))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[0], addrs[1], addrs[2])
		if got := reached(t, webAddr, 30); len(got) != 3 {
			t.Fatalf("after scale-up reached %v", got)
		}
		k.apply(k.slice("web", "web-a", 8080, readyEP(ips[1].String())))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[1])
		if got := reached(t, webAddr, 10); len(got) != 1 || !got[addrs[1]] {
			t.Fatalf("after scale-down reached %v", got)
		}
	})
	t.Run("split into two slices", func(t *testing.T) {
		k.apply(k.slice("web", "web-b", 8080, readyEP(ips[2].String())))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[1], addrs[2])
		if got := reached(t, webAddr, 20); len(got) != 2 {
			t.Fatalf("two slices: reached %v", got)
		}
	})
	t.Run("not ready and terminating", func(t *testing.T) {
		// web-a's endpoint goes not-ready: only web-b's is used.
		k.apply(k.slice("web", "web-a", 8080, ep{ip: ips[1].String(), ready: ptr.To(false)}))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[2])
		// Nothing ready, one serving while terminating: the fallback keeps traffic flowing.
		k.apply(k.slice("web", "web-b", 8080, ep{ip: ips[2].String(), ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)}))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[2])
		if got := readName(t, webAddr); got != addrs[2] {
			t.Fatalf("terminating fallback reached %s", got)
		}
		k.deleteSlice("web-b")
		k.apply(k.slice("web", "web-a", 8080, readyEP(ips[0].String())))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[0])
	})
	t.Run("headless label on the slice", func(t *testing.T) {
		// Kubernetes' e2e "should implement service.kubernetes.io/headless":
		// a slice with the label is left out, as kube-proxy's informers
		// leave it out; without it again, it serves again.
		labelled := k.slice("web", "web-a", 8080, readyEP(ips[0].String()))
		labelled.Labels[corev1.IsHeadlessService] = ""
		k.apply(labelled)
		in.endpointsAre(t, "default/web:tcp/TCP")
		k.apply(k.slice("web", "web-a", 8080, readyEP(ips[0].String())))
		in.endpointsAre(t, "default/web:tcp/TCP", addrs[0])
	})
	t.Run("named target port switch", func(t *testing.T) {
		// The service's targetPort is the name "tcp": the slice's port for
		// that name decides the number.
		k.apply(k.slice("web", "web-a", 9090, readyEP(ips[0].String())))
		want := netip.AddrPortFrom(ips[0], 9090).String()
		in.endpointsAre(t, "default/web:tcp/TCP", want)
		if got := readName(t, webAddr); got != want {
			t.Fatalf("named port switch reached %s", got)
		}
	})
	if got := in.latestGeneration("default/other:tcp/TCP"); got != otherGen {
		t.Fatalf("the other service was touched by web's changes (generation %d -> %d)", otherGen, got)
	}
	if got := readName(t, other.Spec.ClusterIP+":18081"); got != addrs[3] {
		t.Fatalf("other reached %s", got)
	}
}

func (in *instance) latestGeneration(id string) int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.latest[id].GetGeneration()
}

func TestKubeServiceSelection(t *testing.T) {
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	labelled := func(key, value string) func(*corev1.Service) {
		return func(svc *corev1.Service) { svc.Labels = map[string]string{key: value} }
	}
	k.service("plain", 18080, intstr.FromInt32(80), nil)
	k.service("ours", 18080, intstr.FromInt32(80), labelled(watcher.LabelServiceProxyName, "kproxy"))
	k.service("theirs", 18080, intstr.FromInt32(80), labelled(watcher.LabelServiceProxyName, "other-proxy"))
	k.service("headless-label", 18080, intstr.FromInt32(80), labelled(corev1.IsHeadlessService, ""))
	k.service("headless", 18080, intstr.FromInt32(80), func(svc *corev1.Service) { svc.Spec.ClusterIP = corev1.ClusterIPNone })
	k.service("external-name", 18080, intstr.FromInt32(80), func(svc *corev1.Service) {
		svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.invalid"
	})

	names := func(proxyName string) map[string]bool {
		o := watchOptions{sourceFlags: sourceFlags{source: "kube", kubeconfig: s.KproxyKubeconfig, kubeAPIQPS: 5, kubeAPIBurst: 10,
			serviceProxyName: proxyName, minSyncPeriod: 10 * time.Millisecond, nodeName: "node-a"}, json: true}
		got := map[string]bool{}
		for _, line := range splitLines(runWatch(t, o)) {
			var v struct {
				Service struct{ Namespace, Name string }
			}
			if err := jsonUnmarshal(line, &v); err != nil {
				t.Fatal(err)
			}
			got[v.Service.Namespace+"/"+v.Service.Name] = true
		}
		return got
	}
	// As kube-proxy: everything but services of other proxies and headless ones.
	if got, want := names(""), map[string]bool{"default/kubernetes": true, "default/plain": true}; !equalSets(got, want) {
		t.Errorf("default selection: %v, want %v", got, want)
	}
	// As KPNG's --service-proxy-name: only services labelled with it.
	if got, want := names("kproxy"), map[string]bool{"default/ours": true}; !equalSets(got, want) {
		t.Errorf("--service-proxy-name=kproxy: %v, want %v", got, want)
	}
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// startWeb is the kube tests' common start: a real API server, two backend
// addresses serving port 8080 in a network namespace, and Service web
// (port 18080) whose EndpointSlice web-a holds the first.
func startWeb(t *testing.T) (s *kubetest.Server, k kubeObjects, web *corev1.Service, ip1, ip2 netip.Addr) {
	t.Helper()
	s = kubetest.Start(t)
	bn := kubetest.NewBackendNet(t)
	ip1, ip2 = bn.AddIP(t), bn.AddIP(t)
	kubeBackends(t, bn, 8080, ip1, ip2)
	k = kubeObjects{t: t, c: s.Admin, ns: "default"}
	web = k.service("web", 18080, intstr.FromInt32(8080), nil)
	k.apply(k.slice("web", "web-a", 8080, readyEP(ip1.String())))
	return s, k, web, ip1, ip2
}
