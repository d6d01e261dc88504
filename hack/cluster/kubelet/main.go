// Command kubelet is the upstream Kubernetes node agent, built from
// k8s.io/kubernetes in this separate module (see ../kube-apiserver). It is
// not part of the cluster binaries the tests build: it is built on demand,
// only for the side-by-side benchmark against minilet
// (bench/peer_bench_test.go, clusterbin.EnsureKubelet).
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
