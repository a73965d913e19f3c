package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// kube-proxy's detect-local modes that kproxy implements: which sources
// are pods, whose traffic to an externalTrafficPolicy Local service's
// external addresses uses every endpoint (rules.Options.ClusterCIDRs).
const (
	detectLocalClusterCIDR = "ClusterCIDR" // --cluster-cidr: every pod of the cluster
	detectLocalNodeCIDR    = "NodeCIDR"    // the Node's spec.podCIDRs: this node's pods
)

// nodePodCIDRTimeout is how long kproxy waits for the node's pod CIDRs to
// be allocated, as kube-proxy's NodeCIDR mode does.
const nodePodCIDRTimeout = 5 * time.Minute

// nodePodCIDRs reads this node's spec.podCIDRs from the API server,
// waiting (polling every second, at most nodePodCIDRTimeout) while the
// Node is missing or has none yet.
func (o runOptions) nodePodCIDRs(ctx context.Context, log zerolog.Logger) ([]netip.Prefix, error) {
	client, err := o.kubeClient()
	if err != nil {
		return nil, err
	}
	return waitNodePodCIDRs(ctx, client, o.nodeName, time.Second, nodePodCIDRTimeout, log)
}

func waitNodePodCIDRs(ctx context.Context, client kubernetes.Interface, node string, every, timeout time.Duration, log zerolog.Logger) ([]netip.Prefix, error) {
	var cidrs []string
	var last error
	err := wait.PollUntilContextTimeout(ctx, every, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		cidrs = n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		if len(cidrs) == 0 {
			last = fmt.Errorf("node %s has no spec.podCIDRs yet", node)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("--detect-local-mode NodeCIDR: %w (last: %v)", err, last)
	}
	ps, err := parseFamilyPrefixes("detect-local-mode NodeCIDR: node "+node+" spec.podCIDRs", strings.Join(cidrs, ","))
	if err != nil {
		return nil, err
	}
	log.Info().Str("node", node).Strs("podCIDRs", cidrs).Msg("pods are sources within this node's pod CIDRs (detect-local-mode NodeCIDR)")
	return ps, nil
}
