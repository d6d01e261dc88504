// Command kube-apiserver is the upstream Kubernetes API server, built from
// k8s.io/kubernetes in this separate module so that minilet's own module never
// depends on k8s.io/kubernetes. It exists only for the cluster-mode tests.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
