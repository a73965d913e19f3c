package deploy_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kproxy/kproxy/test/kubetest"
)

// The simulated nodes: three Linux, one Windows, each a Node object kwok
// keeps Ready and whose pods kwok runs (on paper).
var (
	linuxNodes   = []string{"kwok-linux-1", "kwok-linux-2", "kwok-linux-3"}
	windowsNodes = []string{"kwok-windows-1"}
)

const (
	// No timer stands between the steps of a rollout here: the DaemonSet
	// has no minReadySeconds and kwok's stages no delay, so each node's
	// step is a DaemonSet controller sync, a scheduling and two kwok
	// status writes. The bounds only keep a stuck rollout from waiting
	// forever; the times measured are logged (seconds on this machine).
	placeBound   = 2 * time.Minute
	rolloutBound = 2 * time.Minute
)

// TestDaemonSetRollout runs deploy/ through the parts that decide whether
// a rollout happens: the real kube-scheduler and the real DaemonSet
// controller (kube-controller-manager) of the API server's version, with
// kwok playing the kubelet of three Linux nodes and one Windows node. Every
// document of deploy/ is applied; each DaemonSet gets a Ready pod on each
// node of its OS and on no other. Then the Linux DaemonSet's image changes,
// and every node's pod rolls to the new revision (controller-revision-hash)
// as the manifest's strategy promises the hand-over: on each node the new
// pod is scheduled and Ready beside the old one before the old one is
// deleted (maxSurge 1), and no node is ever without a Ready pod
// (maxUnavailable 0). A surge pod that cannot be scheduled (a host port the
// old pod holds) leaves the rollout stuck, and the failure names the
// scheduler's reason. The same checks, on a rollout without surge
// (maxUnavailable 1), see each node lose its pod first: they can fail.
func TestDaemonSetRollout(t *testing.T) {
	cpBin := binaryFromEnv(t, envControlPlane, "test/build-control-plane.sh")
	kwokBin := binaryFromEnv(t, envKwok, "test/build-kwok.sh")
	docs := readManifests(t)
	s := kubetest.Start(t)
	cp := startControlPlane(t, s, cpBin, kwokBin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*(placeBound+rolloutBound)+time.Minute)
	defer cancel()

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem}}
	if _, err := s.Admin.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, n := range linuxNodes {
		createNode(ctx, t, s.Admin, n, "linux")
	}
	for _, n := range windowsNodes {
		createNode(ctx, t, s.Admin, n, "windows")
	}

	a := newApplier(t, s)
	var linuxDS *unstructured.Unstructured
	for _, d := range docs {
		if err := a.apply(ctx, d.obj); err != nil {
			t.Fatalf("%s (%s %s): %v", d.where, d.obj.GetKind(), d.obj.GetName(), err)
		}
		if d.obj.GetKind() == "DaemonSet" && d.obj.GetName() == "kproxy" {
			linuxDS = d.obj
		}
	}
	if linuxDS == nil {
		t.Fatal("deploy/ has no DaemonSet kproxy")
	}
	pods := s.Admin.CoreV1().Pods(metav1.NamespaceSystem)

	// Placement: one Ready pod per node of the DaemonSet's OS, none elsewhere.
	began := time.Now()
	want := map[string][]string{"kproxy": linuxNodes, "kproxy-windows": windowsNodes}
	placeCtx, placeCancel := context.WithTimeout(ctx, placeBound)
	ok, why := cp.waitFor(placeCtx, func() (bool, string) {
		list, err := pods.List(placeCtx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for app, nodes := range want {
			// Ready on each node of its OS, and no other pod of it at all
			// (not even a Pending one for another node).
			n := 0
			for _, p := range list.Items {
				if p.Labels["k8s-app"] == app {
					n++
				}
			}
			if got := readyNodes(list.Items, app); !slices.Equal(got, nodes) || n != len(nodes) {
				return false, fmt.Sprintf("%s: %d pods, Ready on %v, want one on each of %v; pods:\n%s", app, n, got, nodes, describePods(list.Items))
			}
		}
		return true, ""
	})
	placeCancel()
	if !ok {
		t.Fatalf("pods not placed within %v: %s", placeBound, why)
	}
	t.Logf("placed: a Ready pod of each DaemonSet on each node of its OS in %v", time.Since(began).Round(time.Millisecond))
	for app, nodes := range want {
		ds, err := s.Admin.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if int(ds.Status.DesiredNumberScheduled) != len(nodes) {
			t.Errorf("DaemonSet %s: desiredNumberScheduled %d, want %d (its OS's nodes %v)", app, ds.Status.DesiredNumberScheduled, len(nodes), nodes)
		}
	}

	// The rollout: a new image, as an edited manifest applied again.
	r := roll(ctx, t, s, a, cp, withImage(linuxDS, "kproxy:rollout-test"))
	for _, v := range r.violations {
		t.Error(v)
	}
	for _, n := range linuxNodes {
		if !r.overlapped[n] {
			t.Errorf("%s: the old pod was deleted before a new one was Ready beside it (no surge)", n)
		}
	}

	// Those checks can fail: the same DaemonSet updating without surge
	// (maxSurge 0, maxUnavailable 1) deletes each old pod first, and
	// they see it.
	noSurge := withImage(linuxDS, "kproxy:rollout-test-no-surge")
	_ = unstructured.SetNestedField(noSurge.Object, map[string]any{"maxSurge": int64(0), "maxUnavailable": int64(1)},
		"spec", "updateStrategy", "rollingUpdate")
	r = roll(ctx, t, s, a, cp, noSurge)
	for _, n := range linuxNodes {
		if r.overlapped[n] {
			t.Errorf("%s: without surge, a new pod was seen Ready beside an old one: the surge check cannot fail", n)
		}
	}
	if len(r.violations) == 0 {
		t.Errorf("without surge (maxUnavailable 1), no node was seen without a Ready pod: the maxUnavailable check cannot fail")
	}

	// The placement check can fail: a DaemonSet without the nodeSelector
	// (the Linux one, renamed and relabelled) is placed on every node,
	// the Windows one included.
	anyOS := linuxDS.DeepCopy()
	anyOS.SetName("kproxy-any-os")
	unstructured.RemoveNestedField(anyOS.Object, "spec", "template", "spec", "nodeSelector")
	for _, path := range [][]string{{"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}} {
		_ = unstructured.SetNestedStringMap(anyOS.Object, map[string]string{"k8s-app": "kproxy-any-os"}, path...)
	}
	if err := a.apply(ctx, anyOS); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(linuxNodes), windowsNodes...)
	sort.Strings(all)
	placeCtx, placeCancel = context.WithTimeout(ctx, placeBound)
	defer placeCancel()
	if ok, why := cp.waitFor(placeCtx, func() (bool, string) {
		list, err := pods.List(placeCtx, metav1.ListOptions{LabelSelector: "k8s-app=kproxy-any-os"})
		if err != nil {
			return false, err.Error()
		}
		if got := readyNodes(list.Items, "kproxy-any-os"); !slices.Equal(got, all) {
			return false, fmt.Sprintf("Ready on %v, want %v; pods:\n%s", got, all, describePods(list.Items))
		}
		return true, ""
	}); !ok {
		t.Errorf("a DaemonSet without a nodeSelector is not placed on every node (the harness would not see a misplaced pod): %s", why)
	}
}

// withImage is a copy of a DaemonSet with every container's image, the
// init containers' too, set to image: what a user edits for an upgrade.
func withImage(ds *unstructured.Unstructured, image string) *unstructured.Unstructured {
	updated := ds.DeepCopy()
	for _, field := range []string{"initContainers", "containers"} {
		containers, _, _ := unstructured.NestedSlice(updated.Object, "spec", "template", "spec", field)
		for _, c := range containers {
			_ = unstructured.SetNestedField(c.(map[string]any), image, "image")
		}
		if containers != nil {
			_ = unstructured.SetNestedSlice(updated.Object, containers, "spec", "template", "spec", field)
		}
	}
	return updated
}

// roll applies updated (the Linux DaemonSet, changed) and follows every
// event of its pods until each Linux node has only a Ready pod of the new
// revision, or fails the test after rolloutBound with each pod's state
// (the scheduler's reason for one it cannot place).
func roll(ctx context.Context, t *testing.T, s *kubetest.Server, a *applier, cp *controlPlane, updated *unstructured.Unstructured) *rollout {
	t.Helper()
	pods := s.Admin.CoreV1().Pods(metav1.NamespaceSystem)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kproxy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(linuxNodes) {
		t.Fatalf("%d kproxy pods before the rollout, want %d:\n%s", len(list.Items), len(linuxNodes), describePods(list.Items))
	}
	oldHash := list.Items[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kproxy", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	began := time.Now()
	if err := a.apply(ctx, updated); err != nil {
		t.Fatalf("DaemonSet %s, changed: %v", updated.GetName(), err)
	}
	newHash := waitNewRevision(ctx, t, cp, s.Admin, updated.GetName(), oldHash)

	r := newRollout(list.Items, oldHash, newHash)
	deadline := time.After(rolloutBound)
	for !r.done() {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatalf("pod watch closed during the rollout; so far:\n%s", r.describe())
			}
			if ev.Type == watch.Error {
				t.Fatalf("pod watch: %v", apierrors.FromObject(ev.Object))
			}
			r.observe(ev, time.Since(began))
		case <-deadline:
			t.Fatalf("rollout from revision %s to %s not done within %v (%s); pods per node:\n%s",
				oldHash, newHash, rolloutBound, cp.exited(), r.describe())
		}
	}
	t.Logf("rolled %d nodes from revision %s to %s in %v (node done at: %s)",
		len(linuxNodes), oldHash, newHash, time.Since(began).Round(time.Millisecond), r.doneTimes())
	return r
}

// createNode makes a Node kwok manages, labelled as a kubelet of that OS
// labels its Node.
func createNode(ctx context.Context, t *testing.T, c kubernetes.Interface, name, os string) {
	t.Helper()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelOSStable:   os,
				corev1.LabelArchStable: "amd64",
				corev1.LabelHostname:   name,
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: os, Architecture: "amd64"},
		},
	}
	if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
}

// waitNewRevision waits for the DaemonSet controller to record the
// template's new revision and returns its hash (the pods'
// controller-revision-hash label).
func waitNewRevision(ctx context.Context, t *testing.T, cp *controlPlane, c kubernetes.Interface, ds, oldHash string) string {
	t.Helper()
	var hash string
	ok, why := cp.waitFor(ctx, func() (bool, string) {
		revs, err := c.AppsV1().ControllerRevisions(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var latest *appsv1.ControllerRevision
		for i := range revs.Items {
			rev := &revs.Items[i]
			if owner := metav1.GetControllerOf(rev); owner != nil && owner.Kind == "DaemonSet" && owner.Name == ds &&
				(latest == nil || rev.Revision > latest.Revision) {
				latest = rev
			}
		}
		if latest == nil || latest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == oldHash {
			return false, fmt.Sprintf("no revision of DaemonSet %s after %s", ds, oldHash)
		}
		hash = latest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		return true, ""
	})
	if !ok {
		t.Fatalf("new revision: %s", why)
	}
	return hash
}

// rollout follows the Linux DaemonSet's pods through the watch's events,
// in order, and checks the hand-over's promises at every event.
type rollout struct {
	oldHash, newHash string
	pods             map[string]*corev1.Pod // by name
	overlapped       map[string]bool        // node: a Ready new pod beside an old, not deleted one
	doneAt           map[string]time.Duration
	violations       []string
}

func newRollout(initial []corev1.Pod, oldHash, newHash string) *rollout {
	r := &rollout{oldHash: oldHash, newHash: newHash, pods: map[string]*corev1.Pod{},
		overlapped: map[string]bool{}, doneAt: map[string]time.Duration{}}
	for i := range initial {
		r.pods[initial[i].Name] = &initial[i]
	}
	return r
}

func (r *rollout) observe(ev watch.Event, at time.Duration) {
	pod, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return
	}
	if ev.Type == watch.Deleted {
		delete(r.pods, pod.Name)
	} else {
		r.pods[pod.Name] = pod
	}
	for _, n := range linuxNodes {
		var ready, newReady, oldLive, total, current int
		for _, p := range r.pods {
			if p.Spec.NodeName != n && nodeOfDaemonPod(p) != n {
				continue
			}
			total++
			live := p.DeletionTimestamp == nil
			isNew := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == r.newHash
			if live && podReady(p) {
				ready++
				if isNew {
					newReady++
				}
			}
			if live && !isNew {
				oldLive++
			}
			if live && isNew && podReady(p) {
				current++
			}
		}
		if ready == 0 {
			r.violations = append(r.violations, fmt.Sprintf("%s: no Ready kproxy pod at %v (maxUnavailable 0)", n, at.Round(time.Millisecond)))
		}
		if newReady > 0 && oldLive > 0 {
			r.overlapped[n] = true
		}
		if _, done := r.doneAt[n]; !done && total == 1 && current == 1 {
			r.doneAt[n] = at
		}
	}
}

func (r *rollout) done() bool {
	for _, n := range linuxNodes {
		var only *corev1.Pod
		count := 0
		for _, p := range r.pods {
			if p.Spec.NodeName == n || nodeOfDaemonPod(p) == n {
				only = p
				count++
			}
		}
		if count != 1 || only.DeletionTimestamp != nil || !podReady(only) ||
			only.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != r.newHash {
			return false
		}
	}
	return true
}

func (r *rollout) describe() string {
	list := make([]corev1.Pod, 0, len(r.pods))
	for _, p := range r.pods {
		list = append(list, *p)
	}
	return fmt.Sprintf("old revision %s, new %s\n%s", r.oldHash, r.newHash, describePods(list))
}

func (r *rollout) doneTimes() string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(r.doneAt)) {
		parts = append(parts, fmt.Sprintf("%s %v", n, r.doneAt[n].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// nodeOfDaemonPod is the node a DaemonSet pod is made for (its node
// affinity on metadata.name), also while it is not yet scheduled.
func nodeOfDaemonPod(p *corev1.Pod) string {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil {
		return ""
	}
	req := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil {
		return ""
	}
	for _, term := range req.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyNodes are the sorted nodes with a Ready, not deleted pod labelled
// k8s-app=app.
func readyNodes(pods []corev1.Pod, app string) []string {
	var nodes []string
	for i := range pods {
		p := &pods[i]
		if p.Labels["k8s-app"] == app && p.DeletionTimestamp == nil && podReady(p) && !slices.Contains(nodes, p.Spec.NodeName) {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	sort.Strings(nodes)
	return nodes
}

// describePods is a line per pod: its node, revision, phase, readiness and,
// while it is not scheduled, the scheduler's reason.
func describePods(pods []corev1.Pod) string {
	var lines []string
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if node == "" {
			node = "(for " + nodeOfDaemonPod(p) + ", unscheduled)"
		}
		line := fmt.Sprintf("  %s on %s: revision %s, %s, ready %v", p.Name, node,
			p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey], p.Status.Phase, podReady(p))
		if p.DeletionTimestamp != nil {
			line += ", deleted"
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				line += fmt.Sprintf(", PodScheduled=%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
