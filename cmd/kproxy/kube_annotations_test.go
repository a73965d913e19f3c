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
	"github.com/kproxy/kproxy/test/kubetest"
	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/kubesource"
)

// The Kubernetes source reads kproxy's service annotations: an unknown
// value is logged naming the service and kept in the service port, which
// is built without the option; a valid value set later reaches the model
// through the informers and clears the error.
func TestKubeSourceAnnotations(t *testing.T) {
	cases := []struct {
		name, annotation, bad, good string
		on                          func(*messages.ServicePort) bool // the option the good value turns on
	}{
		{"pp", watcher.ProxyProtocolAnnotation, "v3", "v2", func(sp *messages.ServicePort) bool {
			return sp.GetProxyProtocol() == messages.ProxyProtocol_PROXY_PROTOCOL_V2
		}},
		{"tp", watcher.PreserveSourceIPAnnotation, "yes", "true", (*messages.ServicePort).GetPreserveSourceIp},
	}
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	svcs := map[string]*corev1.Service{}
	for _, c := range cases {
		svcs[c.name] = k.service(c.name, 80, intstr.FromInt32(8080), func(svc *corev1.Service) {
			svc.Annotations = map[string]string{c.annotation: c.bad}
		})
	}
	logs := &syncBuffer{}
	src, events := startKubeSource(t, s.Admin, kubesource.Options{Options: watcher.Options{NodeName: "node-a"}, Log: zerolog.New(logs)})
	for _, c := range cases {
		t.Run(c.annotation, func(t *testing.T) {
			sp := func() *messages.ServicePort {
				ports, err := src.Build("default/" + c.name)
				if err != nil || len(ports) != 1 {
					t.Fatalf("Build = %v, %v", ports, err)
				}
				return ports[0].GetServicePort()
			}
			quoted := `"` + c.bad + `"`
			if got := sp(); c.on(got) || len(got.GetAnnotationErrors()) != 1 || !strings.Contains(got.GetAnnotationErrors()[0], quoted) {
				t.Errorf("with %s: option on %v, annotation errors %q; want off, the value named", c.bad, c.on(got), got.GetAnnotationErrors())
			}
			logDeadline := time.Now().Add(10 * time.Second)
			for {
				log, grew := logs.next()
				if strings.Contains(log, `"service":"default/`+c.name+`"`) && strings.Contains(log, "annotation ignored") &&
					strings.Contains(log, c.annotation+`: unknown value \"`+c.bad+`\"`) {
					break
				}
				select {
				case <-grew:
				case <-time.After(time.Until(logDeadline)):
					t.Fatalf("log %q lacks the ignored annotation of default/%s", log, c.name)
				}
			}
			svc := svcs[c.name]
			svc.Annotations[c.annotation] = c.good
			if _, err := s.Admin.CoreV1().Services("default").Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !c.on(sp()) {
				select {
				case <-events:
				case <-time.After(time.Until(deadline)):
					t.Fatalf("after the update to %s: %v", c.good, sp())
				}
			}
			if errs := sp().GetAnnotationErrors(); len(errs) != 0 {
				t.Errorf("after the update to %s: annotation errors %q", c.good, errs)
			}
		})
	}
}
