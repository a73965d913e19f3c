//go:build linux

package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/bench/harness"
)

// TestHollowNodes is kproxy-bench's hollow scenario (harness.RunHollow) as
// a test: a core in this process serving N hollow nodes, 100 per child
// process (this test binary re-executed), as kubemark's hollow nodes
// measure kube-proxy. Every node must hold every changed service's last
// change (0 lost).
//
//	KPROXY_HOLLOW=100,1000 KPROXY_HOLLOW_SERVICES=10000 KPROXY_HOLLOW_RATE=100 \
//	  go test -run TestHollowNodes -v -timeout 60m ./bench/
//
// KPROXY_HOLLOW_SECONDS is the churn's length (60), KPROXY_HOLLOW_CHURN=alike
// changes only services every node sees alike, KPROXY_HOLLOW_REPLICAS=3
// serves them from three core replicas, KPROXY_HOLLOW_PROFILE=DIR writes
// the core's profiles there.
func TestHollowNodes(t *testing.T) {
	if os.Getenv(harness.EnvHollowHost) != "" {
		serveHollowHost(t)
		return
	}
	spec := os.Getenv("KPROXY_HOLLOW")
	if spec == "" {
		t.Skip("set KPROXY_HOLLOW=N[,N...] to measure a core with N hollow nodes")
	}
	o := harness.HollowOptions{
		Services:   envInt("KPROXY_HOLLOW_SERVICES", 10000),
		Rate:       float64(envInt("KPROXY_HOLLOW_RATE", 100)),
		Duration:   time.Duration(envInt("KPROXY_HOLLOW_SECONDS", 60)) * time.Second,
		Churn:      harness.HollowChurnAll,
		Replicas:   envInt("KPROXY_HOLLOW_REPLICAS", 1),
		Heartbeat:  time.Duration(envInt("KPROXY_HOLLOW_HEARTBEAT_MS", 0)) * time.Millisecond,
		ProfileDir: os.Getenv("KPROXY_HOLLOW_PROFILE"),
		Host:       hollowHostCommand,
		Progress:   t.Output(),
	}
	if os.Getenv("KPROXY_HOLLOW_CHURN") == harness.HollowChurnAlike {
		o.Churn = harness.HollowChurnAlike
	}
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("KPROXY_HOLLOW: %v", err)
		}
		o.Nodes = append(o.Nodes, n)
	}
	if err := harness.RunHollow(context.Background(), o, t.Output()); err != nil {
		t.Error(err)
	}
}

// hollowHostCommand runs a host of hollow nodes: this test binary, its
// TestHollowNodes seeing harness.EnvHollowHost.
var hollowHostCommand = []string{os.Args[0], "-test.run=^TestHollowNodes$"}

// serveHollowHost runs this process's hollow nodes. With
// KPROXY_HOLLOW_KUBECONFIG (TestHollowNodesKube) each watches the API
// server itself; otherwise each follows the core.
func serveHollowHost(t *testing.T) {
	var newNode harness.NewHollowNode
	if kubeconfig := os.Getenv("KPROXY_HOLLOW_KUBECONFIG"); kubeconfig != "" {
		newNode = func(node string) (harness.HollowNode, error) { return hollowInformers(kubeconfig, node) }
	}
	if err := harness.ServeHollowHost(os.Stdin, os.Stdout, newNode); err != nil {
		t.Fatal(err)
	}
	os.Exit(0) // the parent reads this process's lines: no test framework's after them
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
