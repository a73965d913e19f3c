package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/kubetest"
)

// The Kubernetes source reads kproxy.io/preserve-source-ip: an unknown
// value is logged naming the service and kept in the service port, which
// is built without the option; "true" set later reaches the model through
// the informers.
func TestKubeSourcePreserveSourceIPAnnotation(t *testing.T) {
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	svc := k.service("tp", 80, intstr.FromInt32(8080), func(svc *corev1.Service) {
		svc.Annotations = map[string]string{watcher.PreserveSourceIPAnnotation: "yes"}
	})
	logs := &syncBuffer{}
	src, events := startKubeSource(t, s.Admin, watcher.KubeOptions{Options: watcher.Options{NodeName: "node-a"}, Log: zerolog.New(logs)})
	sp := func() *messages.ServicePort {
		ports, err := src.Build("default/tp")
		if err != nil || len(ports) != 1 {
			t.Fatalf("Build = %v, %v", ports, err)
		}
		return ports[0].GetServicePort()
	}
	if got := sp(); got.GetPreserveSourceIp() || len(got.GetAnnotationErrors()) != 1 || !strings.Contains(got.GetAnnotationErrors()[0], `"yes"`) {
		t.Errorf("with yes: preserve source IP %v, annotation errors %q; want off, the value named", got.GetPreserveSourceIp(), got.GetAnnotationErrors())
	}
	logDeadline := time.Now().Add(10 * time.Second)
	for {
		log, grew := logs.next()
		if strings.Contains(log, `"service":"default/tp"`) && strings.Contains(log, "annotation ignored") && strings.Contains(log, `kproxy.io/preserve-source-ip: unknown value \"yes\"`) {
			break
		}
		select {
		case <-grew:
		case <-time.After(time.Until(logDeadline)):
			t.Fatalf("log %q lacks the ignored annotation of default/tp", log)
		}
	}
	svc.Annotations[watcher.PreserveSourceIPAnnotation] = "true"
	if _, err := s.Admin.CoreV1().Services("default").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !sp().GetPreserveSourceIp() {
		select {
		case <-events:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("after the update to true: %v", sp())
		}
	}
	if errs := sp().GetAnnotationErrors(); len(errs) != 0 {
		t.Errorf("after the update to true: annotation errors %q", errs)
	}
}
