package main

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A SIGTERM with no successor serving is one of two things. The container
// alone restarts (a failed liveness probe, crictl stop): the next process
// of this pod takes the sockets and connections back from the socket
// keeper, so this one leaves them there and exits at once. Or the pod
// itself is deleted with no new pod beside it (the DaemonSet deleted, as
// when kube-proxy takes the node back; a pod deleted by hand): the keeper
// stops with the pod, and no process follows, so this one drains its
// connections for the grace period as in a hand-over. Only the API server
// tells them apart: the pod's deletionTimestamp.

// podEndingTimeout bounds the question: an API server that does not
// answer must not hold a restart in place.
const podEndingTimeout = 2 * time.Second

// podEnding reports whether the pod namespace/name is being deleted (or
// is gone).
func podEnding(ctx context.Context, client kubernetes.Interface, namespace, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, podEndingTimeout)
	defer cancel()
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return pod.DeletionTimestamp != nil, nil
}

// defaultPodName is $POD_NAME (the downward API's).
func defaultPodName() string { return os.Getenv("POD_NAME") }

// defaultPodNamespace is $POD_NAMESPACE, else kube-system.
func defaultPodNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "kube-system"
}
