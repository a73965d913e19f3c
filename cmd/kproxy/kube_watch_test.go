package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// kproxy watch --json on the Kubernetes source, for a known set of objects,
// matches a golden file; --callout receives the same JSON.
func TestKubeWatchJSONGoldenFile(t *testing.T) {
	s := kubetest.Start(t)
	k := kubeObjects{t: t, c: s.Admin, ns: "default"}
	// This node, in zone-a: one endpoint is hinted for it.
	k.node("node-a", "zone-a")
	k.service("web", 80, intstr.FromString("tcp"), func(svc *corev1.Service) {
		svc.Spec.ClusterIP = s.ServiceIP(10).String()
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.ExternalIPs = []string{"192.0.2.50"}
	})
	hinted := k.slice("web", "web-a", 8080, readyEP("192.0.2.11"), readyEP("192.0.2.12"))
	hinted.Endpoints[0].NodeName = ptr.To("node-a")
	hinted.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
	hinted.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}}
	k.apply(hinted)
	k.service("local", 53, intstr.FromInt32(5353), func(svc *corev1.Service) {
		svc.Spec.ClusterIP = s.ServiceIP(11).String()
		svc.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	})
	local := k.slice("local", "local-a", 5353, readyEP("192.0.2.21"), readyEP("192.0.2.22"))
	local.Ports[0].Protocol = ptr.To(corev1.ProtocolUDP)
	local.Endpoints[1].NodeName = ptr.To("node-a")
	k.apply(local)

	src := sourceFlags{source: "kube", kubeconfig: s.KproxyKubeconfig, kubeAPIQPS: 5, kubeAPIBurst: 10,
		nodeName: "node-a", minSyncPeriod: 10 * time.Millisecond}
	// Cluster IPs come from a per-run random range: write it as 127.SVC.
	// The apiserver's own "kubernetes" service points at a random port: drop it.
	norm := func(out string) string {
		var keep []string
		for _, line := range strings.SplitAfter(out, "\n") {
			if !strings.Contains(line, `"Name":"kubernetes"`) {
				keep = append(keep, line)
			}
		}
		prefix := strings.TrimSuffix(s.ServiceCIDR.Addr().String(), "0.0")
		return strings.ReplaceAll(strings.Join(keep, ""), prefix, "127.SVC.")
	}
	golden(t, "kube-watch.golden", norm(runWatch(t, watchOptions{sourceFlags: src, json: true})))

	captured := filepath.Join(t.TempDir(), "callout.json")
	runWatch(t, watchOptions{sourceFlags: src, callout: "cat > " + captured + "; echo done"})
	got, err := os.ReadFile(captured)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kube-watch.golden", norm(string(got))+"\n")
}
