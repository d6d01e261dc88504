// Package clustertest runs a real control plane on loopback for
// cluster-mode tests and benchmarks: etcd and kube-apiserver, and on request
// kube-controller-manager and kube-scheduler too (kubectl is there as a
// client). The binaries are built once from the separate module in
// hack/cluster into a content-keyed cache (package clusterbin) and reused.
//
// Everything here skips unless MINILET_CLUSTER=1: building the control
// plane takes minutes and gigabytes the first time.
package clustertest

import (
	"fmt"
	"os"
	"testing"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
)

// EnvEnable must be "1" for cluster tests to run.
const EnvEnable = "MINILET_CLUSTER"

// EnvCache overrides the cache directory of the built binaries (default
// $HOME/.cache/minilet-cluster).
const EnvCache = clusterbin.EnvCache

// SkipUnlessEnabled skips t unless MINILET_CLUSTER=1.
func SkipUnlessEnabled(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvEnable) != "1" {
		t.Skipf("cluster tests need a real kube-apiserver; set %s=1 (first run builds it, ~10 min)", EnvEnable)
	}
}

// CacheDir is where the built binaries live.
func CacheDir() string { return clusterbin.CacheDir() }

// Binaries returns the control-plane binaries, building them first if the
// cache has none for the current hack/cluster and toolchain. Parallel test
// processes take turns on a lock file, so only one builds.
func Binaries(t testing.TB) clusterbin.Set {
	t.Helper()
	set, err := clusterbin.Ensure(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func check(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
