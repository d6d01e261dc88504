package hosts

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSystemdCgroupDriver runs the service with cgroupDriver: systemd, as
// kubeadm configures it: the pod's cgroup is a slice unit systemd knows,
// with the pod's limits as its properties, and a `systemctl daemon-reload`
// (which re-applies every unit's properties) leaves the pod's limits and
// its container as they were.
func TestSystemdCgroupDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := StartNode(t, NodeConfig{Name: "sdcg"})
	installMinilet(ctx, t, n, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/minilet/manifests
cgroupRoot: /minilet
cgroupDriver: systemd
`)
	if _, err := n.Run(ctx, "systemctl", "enable", "--now", "minilet"); err != nil {
		t.Fatalf("%v\njournal:\n%s", err, journalTail(n))
	}
	// On the host's network: the slices are under test, not the pod network.
	writeManifest(ctx, t, n, "sleeper", strings.Replace(guaranteedPod, "spec:\n", "spec:\n  hostNetwork: true\n", 1))
	pod := waitPod(ctx, t, n, "sleeper-"+n.Name(), 90*time.Second, running)

	// A Guaranteed pod sits right below kubepods.
	unit := "minilet-kubepods-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	dir := "minilet.slice/minilet-kubepods.slice/" + unit
	for _, u := range []string{"minilet.slice", "minilet-kubepods.slice", unit} {
		if p := unitProps(ctx, t, n, u, "ActiveState", "LoadState"); p["ActiveState"] != "active" || p["LoadState"] != "loaded" {
			t.Errorf("%s: %v, want a loaded, active unit", u, p)
		}
	}
	p := unitProps(ctx, t, n, unit, "MemoryLimit", "CPUQuotaPerSecUSec", "CPUShares")
	if p["MemoryLimit"] != "67108864" || p["CPUQuotaPerSecUSec"] != "100ms" || p["CPUShares"] != "102" {
		t.Errorf("%s properties %v, want MemoryLimit 67108864, CPUQuotaPerSecUSec 100ms, CPUShares 102", unit, p)
	}
	limits := func() {
		t.Helper()
		mustOutput(ctx, t, n, "67108864", "cat", "/sys/fs/cgroup/memory/"+dir+"/memory.limit_in_bytes")
		mustOutput(ctx, t, n, "10000", "cat", "/sys/fs/cgroup/cpu/"+dir+"/cpu.cfs_quota_us")
		mustOutput(ctx, t, n, "102", "cat", "/sys/fs/cgroup/cpu/"+dir+"/cpu.shares")
	}
	limits()
	before := pod.Status.ContainerStatuses[0].ContainerID

	if _, err := n.Run(ctx, "systemctl", "daemon-reload"); err != nil {
		t.Fatal(err)
	}
	limits()
	after := waitPod(ctx, t, n, pod.Name, 30*time.Second, running)
	if c := after.Status.ContainerStatuses[0]; c.ContainerID != before || c.RestartCount != 0 {
		t.Errorf("after daemon-reload the container is %s (restarts %d), want %s unrestarted", c.ContainerID, c.RestartCount, before)
	}
}
