package main

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kproxy/kproxy/test/kubetest"
)

// NodeCIDR mode takes this node's spec.podCIDRs from a real API server,
// waiting while the node has none (kube-proxy's waitForPodCIDR), as the
// pods whose traffic short-circuits: this node's, not every node's.
func TestDetectLocalNodeCIDRWaitsForThePodCIDRs(t *testing.T) {
	s := kubetest.Start(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := s.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []netip.Prefix, 1)
	errc := make(chan error, 1)
	go func() {
		ps, err := waitNodePodCIDRs(ctx, s.Admin, "node-a", 20*time.Millisecond, 30*time.Second, zerolog.Nop())
		got <- ps
		errc <- err
	}()
	// The node controller allocates the CIDRs after the node exists.
	n, err := s.Admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "198.51.100.0/26", []string{"198.51.100.0/26", "2001:db8:42:1::/64"}
	if _, err := s.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, err := <-got, <-errc
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/26"), netip.MustParsePrefix("2001:db8:42:1::/64")}
	if !slices.Equal(ps, want) {
		t.Errorf("pod CIDRs %v, want %v", ps, want)
	}

	// A node that never gets them: kproxy does not start, saying why.
	if _, err := waitNodePodCIDRs(ctx, s.Admin, "node-b", 20*time.Millisecond, 200*time.Millisecond, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "NodeCIDR") {
		t.Errorf("a missing node: %v, want an error naming NodeCIDR", err)
	}
}

func TestDetectLocalModeValidated(t *testing.T) {
	for _, c := range []struct {
		source, mode, want string
	}{
		{"kube", "NodeCIDR", ""},
		{"kube", "ClusterCIDR", ""},
		{"file:/dev/null", "NodeCIDR", "only --source kube"},
		{"kube", "BridgeInterface", "want ClusterCIDR or NodeCIDR"},
	} {
		var o runOptions
		if err := runFlags(&o).Parse([]string{"--source", c.source, "--detect-local-mode", c.mode}); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("--source %s --detect-local-mode %s: %v, want %q", c.source, c.mode, err, c.want)
		}
	}
}
