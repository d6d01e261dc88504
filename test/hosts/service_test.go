package hosts

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
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

// shutdownConfig is deploy/etc/config.yaml with graceful node shutdown.
const shutdownConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/minilet/manifests
cgroupRoot: /minilet
shutdownGracePeriod: 20s
shutdownGracePeriodCriticalPods: 8s
`

// shutdownPod is a pod that writes the time it got SIGTERM to
// /var/lib/shutdown-test/<name> (a hostPath) and exits a second later (so
// that a held shutdown shows: the next group waits for it). sleep runs in
// the background so that the shell's trap runs at once. On the host network:
// the test is about the order of the stops (the pod network is proved by
// TestServiceKeepsPodsAcrossRestart).
func shutdownPod(name string, priority int32) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  priority: %[2]d
  hostNetwork: true
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "trap 'echo TERM $(date +%%s%%N) >> /var/lib/shutdown-test/%[1]s; sleep 1; exit 0' TERM; while true; do sleep 1 & wait $!; done"]
    volumeMounts:
    - {name: out, mountPath: /var/lib/shutdown-test}
  volumes:
  - name: out
    hostPath: {path: /var/lib/shutdown-test, type: DirectoryOrCreate}
`, name, priority)
}

// TestGracefulNodeShutdown powers a node off with minilet holding logind's
// delay lock: the regular pod is stopped before the critical one, within
// the grace periods, and the events of it are there after the next boot.
func TestGracefulNodeShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := StartNode(t, NodeConfig{Name: "gns"})
	if out, err := n.Run(ctx, "systemctl", "is-active", "systemd-logind"); err != nil {
		t.Fatalf("systemd-logind is not running in the node (%s): %v", strings.TrimSpace(out), err)
	}
	installMinilet(ctx, t, n, shutdownConfig)
	if _, err := n.Run(ctx, "systemctl", "enable", "--now", "minilet"); err != nil {
		t.Fatalf("%v\njournal:\n%s", err, journalTail(n))
	}
	trimmed(ctx, t, n, "test", "-f", "/etc/systemd/logind.conf.d/99-minilet.conf")
	delay := trimmed(ctx, t, n, "busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec")
	if delay != "t 20000000" {
		t.Errorf("logind's InhibitDelayMaxUSec = %q, want t 20000000 (raised to shutdownGracePeriod)", delay)
	}
	locks := trimmed(ctx, t, n, "systemd-inhibit", "--list", "--no-pager")
	if !regexp.MustCompile(`minilet .*shutdown.*delay`).MatchString(locks) {
		t.Errorf("systemd-inhibit --list shows no delay lock of minilet:\n%s", locks)
	}

	writeManifest(ctx, t, n, "regular", shutdownPod("regular", 0))
	writeManifest(ctx, t, n, "critical", shutdownPod("critical", 2000000000))
	for _, name := range []string{"regular", "critical"} {
		waitPod(ctx, t, n, name+"-"+n.Name(), 90*time.Second, running)
	}

	start := time.Now()
	if err := n.Poweroff(ctx); err != nil {
		t.Fatalf("poweroff: %v", err)
	}
	took := time.Since(start)
	t.Logf("poweroff with graceful pod shutdown: %v", took.Round(10*time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("the poweroff took %v, more than shutdownGracePeriod 20s and slack", took)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stamps := map[string]int64{}
	for _, name := range []string{"regular", "critical"} {
		out, err := n.Run(ctx, "cat", "/var/lib/shutdown-test/"+name)
		if err != nil {
			t.Errorf("%s was not signalled: %v", name, err)
			continue
		}
		var ns int64
		if _, err := fmt.Sscanf(out, "TERM %d\n", &ns); err != nil || strings.Count(out, "\n") != 1 {
			t.Errorf("%s wrote %q, want one line TERM <ns>: one SIGTERM", name, out)
			continue
		}
		stamps[name] = ns
		t.Logf("%s got SIGTERM %v after the poweroff began", name, time.Unix(0, ns).Sub(start).Round(time.Millisecond))
	}
	// regular takes a second to stop; critical's group waits for it.
	if r, c := stamps["regular"], stamps["critical"]; r != 0 && c != 0 && c-r < int64(time.Second) {
		t.Errorf("critical was signalled %v after regular, want regular first and critical after regular's second of stopping", time.Duration(c-r))
	}

	// The agent starts again at boot (enabled); its event store kept the
	// shutdown.
	waitActive(ctx, t, n, "minilet")
	out := trimmed(ctx, t, n, "minilet", "get", "events", "-o", "json")
	var evs v1.EventList
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("minilet get events -o json: %v: %.300s", err, out)
	}
	var shutdown bool
	killing := map[string]bool{}
	for _, e := range evs.Items {
		switch {
		case e.Reason == "Shutdown" && e.InvolvedObject.Kind == "Node":
			shutdown = true
		case e.Reason == "Killing" && e.InvolvedObject.Kind == "Pod" && e.LastTimestamp.Time.Before(start.Add(took)):
			killing[strings.TrimSuffix(e.InvolvedObject.Name, "-"+n.Name())] = true
		}
	}
	if !shutdown {
		t.Errorf("no node event Shutdown in the agent's events after the boot")
	}
	if !killing["regular"] || !killing["critical"] {
		t.Errorf("Killing events from before the reboot for %v, want regular and critical", killing)
	}
	if t.Failed() {
		t.Logf("events:\n%s", out)
	}
}
