// Command kubectl is upstream's kubectl (k8s.io/kubernetes/cmd/kubectl),
// for test/cluster: the cluster's operator and Kubernetes' e2e tests use it.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // as upstream's main
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
