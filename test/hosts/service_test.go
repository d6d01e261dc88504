package hosts

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// guaranteedPod is a Guaranteed pod (requests = limits) on the pod network.
const guaranteedPod = `apiVersion: v1
kind: Pod
metadata:
  name: sleeper
spec:
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "while true; do sleep 1; done"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 100m, memory: 64Mi}
`

// TestServiceKeepsPodsAcrossRestart installs minilet as a systemd service
// in a node container (the unit and configuration of deploy/), starts it
// (Type=notify: start returns after READY), runs a Guaranteed pod, and
// restarts the service: the pod keeps running, same container, same
// process, no restart. The agent's logs reach the journal as fields.
func TestServiceKeepsPodsAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := StartNode(t, NodeConfig{Name: "svc"})
	installMinilet(ctx, t, n, "")

	start := time.Now()
	if _, err := n.Run(ctx, "systemctl", "enable", "--now", "minilet"); err != nil {
		t.Fatalf("%v\njournal:\n%s", err, journalTail(n))
	}
	t.Logf("systemctl enable --now minilet (start to READY): %v", time.Since(start).Round(10*time.Millisecond))
	p := unitProps(ctx, t, n, "minilet", "ActiveState", "SubState", "StatusText", "WatchdogUSec")
	if p["ActiveState"] != "active" || p["SubState"] != "running" {
		t.Errorf("minilet is %s/%s after start, want active/running", p["ActiveState"], p["SubState"])
	}
	if !strings.HasPrefix(p["StatusText"], "serving ") || !strings.HasSuffix(p["StatusText"], " pod(s)") {
		t.Errorf("StatusText = %q, want \"serving N pod(s)\"", p["StatusText"])
	}
	if p["WatchdogUSec"] != "1min" {
		t.Errorf("WatchdogUSec = %q, want 1min", p["WatchdogUSec"])
	}

	writeManifest(ctx, t, n, "sleeper", guaranteedPod)
	name := "sleeper-" + n.Name()
	start = time.Now()
	pod := waitPod(ctx, t, n, name, 90*time.Second, running)
	t.Logf("pod running %v after its manifest was written; IP %q", time.Since(start).Round(10*time.Millisecond), pod.Status.PodIP)
	if pod.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Errorf("QOS class %q, want Guaranteed", pod.Status.QOSClass)
	}
	if pod.Status.PodIP == "" || pod.Status.PodIP == n.IP() {
		t.Errorf("pod IP %q: want an address on the pod network, not the node's %s", pod.Status.PodIP, n.IP())
	}
	uid := string(pod.UID)
	cg := "/sys/fs/cgroup/memory/minilet/kubepods/pod" + uid
	mustOutput(ctx, t, n, "67108864", "cat", cg+"/memory.limit_in_bytes")
	mustOutput(ctx, t, n, "10000", "cat", "/sys/fs/cgroup/cpu/minilet/kubepods/pod"+uid+"/cpu.cfs_quota_us")

	before := pod.Status.ContainerStatuses[0]
	procs := podProcesses(ctx, t, n, uid)
	shPID := ""
	for pid, comm := range procs {
		if comm == "sh" {
			shPID = pid
		}
	}
	if shPID == "" {
		t.Fatalf("no sh in the pod's cgroup: %v", procs)
	}

	start = time.Now()
	if _, err := n.Run(ctx, "systemctl", "restart", "minilet"); err != nil {
		t.Fatalf("%v\njournal:\n%s", err, journalTail(n))
	}
	waitActive(ctx, t, n, "minilet")
	t.Logf("systemctl restart minilet to active again: %v", time.Since(start).Round(10*time.Millisecond))
	after := waitPod(ctx, t, n, name, 30*time.Second, running)
	if after.UID != pod.UID {
		t.Errorf("pod UID %s after the restart, was %s", after.UID, pod.UID)
	}
	now := after.Status.ContainerStatuses[0]
	if now.ContainerID != before.ContainerID || now.RestartCount != 0 {
		t.Errorf("container %s (restarts %d) after the restart, was %s (restarts %d)", now.ContainerID, now.RestartCount, before.ContainerID, before.RestartCount)
	}
	if got := podProcesses(ctx, t, n, uid); got[shPID] != "sh" {
		t.Errorf("the container's sh (PID %s) is gone after the restart; the pod's processes now: %v", shPID, got)
	}

	// Structured logging: the agent's records are journal entries with
	// fields of their own.
	out := trimmed(ctx, t, n, "journalctl", "-u", "minilet", "-o", "json", "--no-pager")
	components := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if c, ok := e["COMPONENT"].(string); ok {
			components[c]++
		}
	}
	if len(components) == 0 {
		t.Errorf("no journal entry of minilet has a COMPONENT field; last lines:\n%s", journalTail(n))
	}
	t.Logf("journal entries by COMPONENT: %v", components)
}
