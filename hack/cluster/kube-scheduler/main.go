// Command kube-scheduler is the upstream Kubernetes scheduler, built from
// k8s.io/kubernetes in this separate module (see ../kube-apiserver). It exists
// only for the cluster-mode tests, which run it against the test API server.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
