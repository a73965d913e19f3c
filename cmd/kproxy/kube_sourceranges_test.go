package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/kubetest"
	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/kubesource"
)

// The Kubernetes source carries a LoadBalancer service's
// loadBalancerSourceRanges into the model, masked, both families, and a
// change of them reaches it through the informers.
func TestKubeSourceLoadBalancerSourceRanges(t *testing.T) {
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	svc := k.service("fw", 80, intstr.FromInt32(8080), func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.LoadBalancerSourceRanges = []string{"192.0.2.3/32", "203.0.113.0/24"}
	})
	src, events := startKubeSource(t, s.Admin, kubesource.Options{Options: watcher.Options{NodeName: "node-a"}})
	ranges := func() []string {
		ports, err := src.Build("default/fw")
		if err != nil || len(ports) != 1 {
			t.Fatalf("Build = %v, %v", ports, err)
		}
		return ports[0].GetServicePort().GetLoadBalancerSourceRanges()
	}
	if got := ranges(); !slices.Equal(got, []string{"192.0.2.3/32", "203.0.113.0/24"}) {
		t.Fatalf("source ranges %v", got)
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"2001:db8:1::/48"}
	if _, err := s.Admin.CoreV1().Services("default").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(ranges(), []string{"2001:db8:1::/48"}) {
		select {
		case <-events:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("source ranges after the update: %v", ranges())
		}
	}
}

// startKubeSource starts a kubesource.Source over c with opts and returns its
// view, which applies every event as a Tracker does, with the events
// (dropped when the channel is full: a test only waits for the next one);
// it stops with the test.
func startKubeSource(t *testing.T, c kubernetes.Interface, opts kubesource.Options) (*appliedView, <-chan watcher.Event) {
	t.Helper()
	src, err := kubesource.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	v := &appliedView{src: src}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan watcher.Event, 64)
	if err := src.Start(ctx, func(e watcher.Event) {
		v.mu.Lock()
		src.Apply(e)
		v.mu.Unlock()
		select {
		case events <- e:
		default:
		}
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); src.Stop() }) // the informers end with ctx
	return v, events
}

// appliedView is a kubesource.Source's view with its events applied as they come
// (informer goroutines) and read by the test.
type appliedView struct {
	mu  sync.Mutex
	src *kubesource.Source
}

func (v *appliedView) Build(service string) ([]*messages.ServicePortEndpoints, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.src.Build(service)
}
