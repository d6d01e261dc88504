// Command kubectl is the upstream Kubernetes command-line client, built in
// this separate module so that tests can drive the test cluster as a user
// would. It exists only for the cluster-mode tests.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
