// Command kube-control-plane is upstream's kube-scheduler and
// kube-controller-manager in one binary, for kproxy's DaemonSet rollout test
// (deploy/): one build and one link share the packages the two have in common
// (most of them), and both come from the same k8s.io/kubernetes as the API
// server (test/k8s/cmd/kube-apiserver-etcd). Build it with build-control-plane.sh
// (`make control-plane`), which caches the result.
//
//	kube-control-plane kube-scheduler [kube-scheduler flags]
//	kube-control-plane kube-controller-manager [kube-controller-manager flags]
package main

import (
	"fmt"
	"os"
	_ "time/tzdata" // as upstream's kube-controller-manager main

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream's mains
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "usage: %s kube-scheduler|kube-controller-manager [flags]\n", os.Args[0])
		os.Exit(2)
	}
	prog, name := os.Args[0], os.Args[1]
	// Each command parses os.Args[1:] (cobra); drop the component name.
	os.Args = append([]string{name}, os.Args[2:]...)
	switch name {
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown component %q (kube-scheduler or kube-controller-manager)\n", prog, name)
		os.Exit(2)
	}
}
