// Command kubelet is upstream's kubelet (k8s.io/kubernetes/cmd/kubelet) at
// the version go.mod pins, for the nodes of the cluster test/cluster
// assembles from parts. build-k8s-cmd.sh builds and caches it
// (MODULE=node test/k8s/build-k8s-cmd.sh kubelet).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream's main
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
