package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kproxy/kproxy/test/kubetest"
)

// On a real API server: a pod that lives is not ending (its container
// restarts in place), one being deleted (a finalizer holds it with its
// deletionTimestamp set, as a kubelet's grace period does) or gone is.
func TestPodEnding(t *testing.T) {
	s := kubetest.Start(t)
	ctx := context.Background()
	// No controller manager: the service account the pod runs as is ours to create.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := s.Admin.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := s.Admin.CoreV1().Pods("kube-system")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kproxy-abcde", Finalizers: []string{"kproxy.io/test"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kproxy", Image: "kproxy"}}},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(name string, want bool) {
		t.Helper()
		got, err := podEnding(ctx, s.Admin, "kube-system", name)
		if err != nil || got != want {
			t.Fatalf("podEnding(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	check("kproxy-abcde", false)
	if err := pods.Delete(ctx, "kproxy-abcde", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("kproxy-abcde", true)
	check("kproxy-gone", true)

	// An API server that cannot answer is an error, not a verdict.
	s.Stop(t)
	if _, err := podEnding(ctx, s.Admin, "kube-system", "kproxy-abcde"); err == nil {
		t.Fatal("podEnding with the API server stopped: no error")
	}
}
