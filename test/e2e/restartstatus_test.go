package e2e

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestStatusHoldsAcrossAgentRestarts restarts the agent under a running pod
// with startup and readiness probes and reads /pods at once each time: the
// first answer lists the pod Running and Ready, with the age it had, never
// empty, Pending or not Ready. CI runs 3 restarts on a quiet machine;
// MINILET_E2E_RESTARTS=20 MINILET_E2E_RESTART_LOAD=1 is the check
// (20 restarts, the machine loaded with 2 busy loops per core).
func TestStatusHoldsAcrossAgentRestarts(t *testing.T) {
	requireRoot(t)
	restarts := 3
	if n, err := strconv.Atoi(os.Getenv("MINILET_E2E_RESTARTS")); err == nil && n > 0 {
		restarts = n
	}
	if os.Getenv("MINILET_E2E_RESTART_LOAD") != "" {
		loadMachine(t, 2*runtime.NumCPU())
	}
	for _, rt := range podRuntimes() {
		t.Run(rt.name, func(t *testing.T) { restartUnderPod(t, rt, restarts) })
	}
}

// restartUnderPod restarts the agent n times under a probed pod on rt and
// checks the first /pods after each restart.
func restartUnderPod(t *testing.T, rt podRuntime, restarts int) {
	a := rt.start(t)
	a.WriteManifest("web.yaml", rt.manifest("web", "", `command: ["sleep", "1000"],
    startupProbe: {exec: {command: ["true"]}, periodSeconds: 1},
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 5}`))
	name := a.Static("web")
	var before v1.Pod
	a.Eventually("web runs and is ready", func() (bool, string) {
		p, ok := a.Pod(name)
		before = p
		return ok && ready(p), describe(p, ok)
	})

	flaps := 0
	for i := 1; i <= restarts; i++ {
		a.Stop()
		a.Start()
		p, ok := a.Pod(name) // the first /pods after the restart
		if !ok || !ready(p) {
			flaps++
			t.Errorf("restart %d: first /pods shows %s, want Running and Ready", i, describe(p, ok))
			continue
		}
		// The age goes on from the saved start (the first run's creation
		// time itself is not saved; the start came at its first sync).
		if p.Status.StartTime == nil || !p.Status.StartTime.Equal(before.Status.StartTime) ||
			p.CreationTimestamp.Before(&before.CreationTimestamp) || p.Status.StartTime.Before(&p.CreationTimestamp) {
			t.Errorf("restart %d: creation %v start %v, want the start %v kept and the creation between %v and it", i,
				p.CreationTimestamp, p.Status.StartTime, before.Status.StartTime, before.CreationTimestamp)
		}
	}
	t.Logf("%d flaps over %d restarts", flaps, restarts)
}

// ready: Running, the Ready condition true and every container ready and
// started.
func ready(p v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status != v1.ConditionTrue {
			return false
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready || cs.Started == nil || !*cs.Started {
			return false
		}
	}
	return true
}

// loadMachine runs n busy loops until the test ends.
func loadMachine(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
}
