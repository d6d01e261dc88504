// Command kube-controller-manager is the upstream Kubernetes controller
// manager, built from k8s.io/kubernetes in this separate module (see
// ../kube-apiserver). It exists only for the cluster-mode tests.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream's binary embeds them

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
