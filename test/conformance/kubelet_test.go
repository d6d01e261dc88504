package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// startKubeletNode joins the upstream kubelet (the control plane's
// version, built by clusterbin.EnsureKubelet) to srv on a private
// containerd: the reference column of the results. It is configured as a
// kubeadm node is where the suite can tell (webhook authentication and
// authorization, client certificates of the cluster CA, the cgroupfs
// driver), and kept off the host where it would change it (its own cgroup
// root, kernel tunables in a mount namespace of its own; see
// harness.UpstreamKubeletCommand).
func startKubeletNode(t *testing.T, srv *clustertest.Server) testNode {
	t.Helper()
	set, err := clusterbin.EnsureKubelet(t.Logf)
	if err != nil {
		t.Fatalf("building the upstream kubelet: %v", err)
	}
	dir := t.TempDir()
	for _, d := range []string{"root", "pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cgroupRoot := fmt.Sprintf("/minilet-conformance-kubelet-%d", os.Getpid())
	if err := harness.MakeCgroupRoot(cgroupRoot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { harness.RemoveCgroupRoot(cgroupRoot) }) // after containerd is down
	n := testNode{
		name:     fmt.Sprintf("kubelet-%d", os.Getpid()%100000),
		rootDir:  filepath.Join(dir, "root"),
		endpoint: privateContainerd(t),
	}
	cfg := filepath.Join(dir, "config.yaml")
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]s
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: %[2]s
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]s}
authorization: {mode: Webhook}
port: %[4]d
readOnlyPort: 0
healthzPort: 0
podLogsDir: %[5]s/logs
makeIPTablesUtilChains: false
protectKernelDefaults: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, n.endpoint, cgroupRoot, srv.CAFile, kubeletPort(t), dir)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its cleanup runs before containerd's (registered earlier). The
	// volumes it mounts under its root dir must reach containerd, in the
	// host's mount namespace; it links container logs in the host's
	// /var/log/containers.
	k, err := harness.StartUpstreamKubelet(t, dir, set.Path(clusterbin.Kubelet), harness.UpstreamKubeletOptions{Shared: n.rootDir},
		"--config", cfg, "--kubeconfig", srv.NodeKubeconfig(n.name), "--root-dir", n.rootDir,
		"--cert-dir", filepath.Join(dir, "pki"), "--hostname-override", n.name, "--v", "2")
	if err != nil {
		t.Fatal(err)
	}
	n.logs = func() string { return k.Log(1 << 30) }
	return n
}
