// Command kube-proxy is upstream's kube-proxy (k8s.io/kubernetes/cmd/kube-proxy)
// at the version go.mod pins: test/cluster's reference node proxy, run
// where kproxy would be, so a failure of the cluster is told apart from
// one of kproxy.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream's main
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
