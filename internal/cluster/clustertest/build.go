// Package clustertest runs a real kube-apiserver and etcd on loopback for
// cluster-mode tests and benchmarks. The binaries are built once from the
// separate module in hack/cluster into a cache directory and reused.
//
// Everything here skips unless MINILET_CLUSTER=1: building the API server
// takes minutes and gigabytes the first time.
package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// EnvEnable must be "1" for cluster tests to run.
const EnvEnable = "MINILET_CLUSTER"

// EnvCache overrides the cache directory of the built binaries (default
// $HOME/.cache/minilet-cluster).
const EnvCache = "MINILET_CLUSTER_CACHE"

// SkipUnlessEnabled skips t unless MINILET_CLUSTER=1.
func SkipUnlessEnabled(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvEnable) != "1" {
		t.Skipf("cluster tests need a real kube-apiserver; set %s=1 (first run builds it, ~5 min)", EnvEnable)
	}
}

// CacheDir is where the built binaries live.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "minilet-cluster")
}

// hackDir is the module that builds kube-apiserver and etcd.
func hackDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "cluster")
}

// Binaries returns the paths of kube-apiserver and etcd, building them
// first if the cache lacks them or hack/cluster changed since. Parallel
// test processes take turns on a lock file, so only one builds.
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	bin := filepath.Join(CacheDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(CacheDir(), "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	apiserver, etcd = filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "etcd")
	if fresh(apiserver) && fresh(etcd) {
		return apiserver, etcd
	}
	start := time.Now()
	t.Logf("building kube-apiserver and etcd from %s into %s (minutes the first time)", hackDir(), bin)
	cmd := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./kube-apiserver", "./etcd")
	cmd.Dir = hackDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the cluster binaries: %v\n%s", err, out)
	}
	t.Logf("built the cluster binaries in %s", time.Since(start).Round(time.Second))
	return apiserver, etcd
}

// fresh reports whether a built binary exists and is newer than the
// sources of hack/cluster.
func fresh(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	newest := time.Time{}
	_ = filepath.Walk(hackDir(), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		return nil
	})
	return st.ModTime().After(newest)
}

func check(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
