package kubetest_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// selectorless is a Service with no selector: with no controller-manager
// running, its EndpointSlices are the test's to write.
func selectorless(name string, port int32, mutate func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if mutate != nil {
		mutate(svc)
	}
	return svc
}

func slice(service, name string, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   "kubetest",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return es
}

func TestHarness(t *testing.T) {
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := s.Admin

	cfg, err := clientcmd.BuildConfigFromFlags("", s.KproxyKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kproxy, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("identity", func(t *testing.T) {
		r, err := kproxy.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := r.Status.UserInfo
		if u.Username != kubetest.KproxyUser || !slices.Contains(u.Groups, "system:serviceaccounts:kube-system") {
			t.Fatalf("kproxy kubeconfig authenticates as %q %v", u.Username, u.Groups)
		}
		if _, err := admin.CoreV1().ServiceAccounts("kube-system").Get(ctx, "kproxy", metav1.GetOptions{}); err != nil {
			t.Fatalf("deploy/rbac.yaml not applied: %v", err)
		}
	})

	t.Run("kproxy may read what it proxies", func(t *testing.T) {
		if _, err := kproxy.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list services: %v", err)
		}
		if _, err := kproxy.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list endpointslices: %v", err)
		}
		if _, err := kproxy.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"}); err != nil {
			t.Errorf("list nodes: %v", err)
		}
		w, err := kproxy.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("watch endpointslices: %v", err)
		} else {
			w.Stop()
		}
	})

	t.Run("kproxy may do nothing else", func(t *testing.T) {
		_, err := kproxy.CoreV1().Services("default").Create(ctx, selectorless("nope", 80, nil), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("create service as kproxy: want Forbidden, got %v", err)
		}
		_, err = kproxy.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list secrets as kproxy: want Forbidden, got %v", err)
		}
		_, err = kproxy.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("nope", "nope", "192.0.2.1"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("create endpointslice as kproxy: want Forbidden, got %v", err)
		}
	})

	// What the apiserver accepts as addresses, for kproxy's tests.
	bn := kubetest.NewBackendNet(t)
	endpointIP := bn.AddIP(t).String()
	t.Run("addresses", func(t *testing.T) {
		cidr := s.ServiceCIDR
		svc, err := admin.CoreV1().Services("default").Create(ctx, selectorless("allocated", 80, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !cidr.Contains(ip) || !ip.IsLoopback() {
			t.Errorf("allocated clusterIP %q: want a loopback address in %s", svc.Spec.ClusterIP, cidr)
		}
		// A clusterIP (loopback) can be listened on here, an endpoint in the backend namespace.
		for i, addr := range []string{svc.Spec.ClusterIP, endpointIP} {
			var l net.Listener
			if i == 0 {
				l, err = net.Listen("tcp", net.JoinHostPort(addr, "0"))
			} else {
				l = bn.Listen(t, "tcp", net.JoinHostPort(addr, "0"))
			}
			if err != nil {
				t.Errorf("listen on %s: %v", addr, err)
				continue
			}
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Errorf("dial %s: %v", l.Addr(), err)
			} else {
				c.Close()
			}
			l.Close()
		}
		fixed := s.ServiceIP(10).String()
		if got, err := admin.CoreV1().Services("default").Create(ctx, selectorless("fixed", 80, func(s *corev1.Service) {
			s.Spec.ClusterIP = fixed
		}), metav1.CreateOptions{}); err != nil || got.Spec.ClusterIP != fixed {
			t.Errorf("clusterIP %s (in range): %v", fixed, err)
		}
		_, err = admin.CoreV1().Services("default").Create(ctx, selectorless("outside", 80, func(s *corev1.Service) {
			s.Spec.ClusterIP = "127.0.0.10"
		}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("clusterIP 127.0.0.10 (outside the range): want Invalid, got %v", err)
		}
		_, err = admin.CoreV1().Services("default").Create(ctx, selectorless("loopback-external", 80, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"127.0.0.10"}
		}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("externalIPs [127.0.0.10]: want Invalid (loopback), got %v", err)
		}
		if _, err := admin.CoreV1().Services("default").Create(ctx, selectorless("external", 80, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{endpointIP}
		}), metav1.CreateOptions{}); err != nil {
			t.Errorf("externalIPs [%s]: %v", endpointIP, err)
		}
		_, err = admin.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("allocated", "loopback", "127.0.0.11"), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("endpoint 127.0.0.11: want Invalid (loopback), got %v", err)
		}
		if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("allocated", "allocated-1", endpointIP), metav1.CreateOptions{}); err != nil {
			t.Errorf("endpoint %s: %v", endpointIP, err)
		}
	})

	// A Service, its EndpointSlice and a Node survive a restart.
	svc, err := admin.CoreV1().Services("default").Create(ctx, selectorless("web", 8080, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("web", "web-1", endpointIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s.Stop(t)
	if _, err := admin.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver still answers after Stop")
	}
	s.Restart(t)

	got, err := kproxy.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service after restart: %v", err)
	}
	if got.UID != svc.UID || got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("service after restart: uid %s clusterIP %s, want %s %s", got.UID, got.Spec.ClusterIP, svc.UID, svc.Spec.ClusterIP)
	}
	es, err := kproxy.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil || len(es.Items) != 1 || es.Items[0].Endpoints[0].Addresses[0] != endpointIP {
		t.Errorf("endpointslices of web after restart: %v %+v", err, es)
	}
	if _, err := kproxy.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("node after restart: %v", err)
	}
}
