package e2e

// Fault tests on the embedded runtime, with the real binary: a container's
// monitor killed, its state files deleted, the agent's cgroup killed, each
// under a running pod. Whatever happens, the pod keeps running and its
// container never runs twice.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// markedPod is a pod whose container carries marker in its command line,
// by which its running copies are counted.
func markedPod(name, marker string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: host, command: ["/bin/sh", "-c", "while :; do sleep 0.2; done", "%s"]}
`, name, marker)
}

// markedProcs lists the live processes whose command line holds marker.
func markedProcs(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte(marker)) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 1 && (f[0] == "Z" || f[0] == "X") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

func parentOf(pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// runningMarked starts the pod and waits until its one container runs.
func runningMarked(t *testing.T, a *harness.Agent, pod, marker string) v1.ContainerStatus {
	a.WriteManifest(pod+".yaml", markedPod(pod, marker))
	var s v1.ContainerStatus
	a.Eventually(pod+" Running", func() (bool, string) {
		p, ok := a.Pod(a.Static(pod))
		s, _ = containerStatus(p, "main")
		return ok && s.State.Running != nil && len(markedProcs(marker)) == 1, describe(p, ok)
	})
	return s
}

// noDuplicateUntil polls until cond holds, failing the moment two copies
// of the marked container run at once.
func noDuplicateUntil(t *testing.T, a *harness.Agent, marker, what string, cond func() (bool, string)) {
	t.Helper()
	a.Eventually(what, func() (bool, string) {
		if ps := markedProcs(marker); len(ps) > 1 {
			t.Fatalf("%d copies of the container run at once: %v", len(ps), ps)
		}
		return cond()
	})
}

func TestKilledMonitorNeverLeavesADuplicate(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	marker := fmt.Sprintf("marker-mon-%d", time.Now().UnixNano())
	before := runningMarked(t, a, "mon", marker)
	ctr := markedProcs(marker)[0]
	monitor := parentOf(ctr)
	if err := syscall.Kill(monitor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	noDuplicateUntil(t, a, marker, "the container restarted once, the lost monitor named", func() (bool, string) {
		p, ok := a.Pod(a.Static("mon"))
		s, _ := containerStatus(p, "main")
		last := s.LastTerminationState.Terminated
		return ok && s.RestartCount == before.RestartCount+1 && s.State.Running != nil && last != nil &&
			strings.Contains(last.Message, "monitor") && len(markedProcs(marker)) == 1, describe(p, ok)
	})
	if ps := markedProcs(marker); len(ps) != 1 || ps[0] == ctr {
		t.Fatalf("processes %v, want one new copy (the original %d killed)", ps, ctr)
	}
	stateLostEvent(t, a, "mon", before.ContainerID, "monitor", "killed")
}

// stateLostEvent waits for the pod's one ContainerStateLost Warning event
// about the container id, naming what was lost and what was done.
func stateLostEvent(t *testing.T, a *harness.Agent, pod, id string, lost, done string) {
	t.Helper()
	id = id[strings.Index(id, "://")+3:]
	a.Eventually("a ContainerStateLost event naming the "+lost+" and that the container was "+done, func() (bool, string) {
		var got []string
		n := 0
		for _, e := range a.Events("default/" + a.Static(pod)) {
			got = append(got, e.Type+" "+e.Reason+": "+e.Message)
			if e.Reason == "ContainerStateLost" && strings.Contains(e.Message, id) {
				if e.Type != v1.EventTypeWarning || !strings.Contains(e.Message, lost) || !strings.Contains(e.Message, done) {
					t.Fatalf("state-lost event %s %q does not name what was lost (%s) and done (%s)", e.Type, e.Message, lost, done)
				}
				n += int(max(e.Count, 1))
			}
		}
		if n > 1 {
			t.Fatalf("%d ContainerStateLost events for one loss:\n%s", n, strings.Join(got, "\n"))
		}
		return n == 1, strings.Join(got, "\n")
	})
}

func TestDeletedStateFilesNeverLeaveADuplicate(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	marker := fmt.Sprintf("marker-state-%d", time.Now().UnixNano())
	before := runningMarked(t, a, "state", marker)
	ctr := markedProcs(marker)[0]
	dir := filepath.Join(a.RootDir, "runtime", "containers", before.ContainerID[strings.Index(before.ContainerID, "://")+3:])
	a.Stop()
	if err := os.Remove(filepath.Join(dir, "start.json")); err != nil {
		t.Fatal(err)
	}
	a.Start()
	noDuplicateUntil(t, a, marker, "the same container re-adopted", func() (bool, string) {
		p, ok := a.Pod(a.Static("state"))
		s, _ := containerStatus(p, "main")
		return ok && s.ContainerID == before.ContainerID && s.State.Running != nil && s.RestartCount == before.RestartCount, describe(p, ok)
	})
	if ps := markedProcs(marker); len(ps) != 1 || ps[0] != ctr {
		t.Fatalf("processes %v, want the original %d alone", ps, ctr)
	}
	stateLostEvent(t, a, "state", before.ContainerID, "start record", "re-adopted")
	// Its container record lost: the original is ended before a new copy
	// runs.
	a.Stop()
	if err := os.WriteFile(filepath.Join(dir, "container.json"), []byte("{corrupt"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Start()
	noDuplicateUntil(t, a, marker, "a new container in place of the unlisted original", func() (bool, string) {
		p, ok := a.Pod(a.Static("state"))
		s, _ := containerStatus(p, "main")
		ps := markedProcs(marker)
		return ok && s.ContainerID != before.ContainerID && s.State.Running != nil && len(ps) == 1 && ps[0] != ctr, describe(p, ok)
	})
}

func TestKilledAgentCgroupLeavesPodsRunning(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	// The agent in a cgroup of its own, as a service manager puts it.
	agentCgroup := filepath.Join("/sys/fs/cgroup/pids", fmt.Sprintf("minilet-e2e-agent-%d", os.Getpid()))
	if err := os.Mkdir(agentCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(agentCgroup) })
	agent := agentPid(t, a)
	if err := os.WriteFile(filepath.Join(agentCgroup, "cgroup.procs"), []byte(strconv.Itoa(agent)), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("marker-cg-%d", time.Now().UnixNano())
	before := runningMarked(t, a, "cg", marker)
	ctr := markedProcs(marker)[0]
	// The service manager stops the agent: every process in its cgroup.
	procs, _ := os.ReadFile(filepath.Join(agentCgroup, "cgroup.procs"))
	for _, f := range strings.Fields(string(procs)) {
		if pid, _ := strconv.Atoi(f); pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	a.Stop()
	if ps := markedProcs(marker); len(ps) != 1 || ps[0] != ctr {
		t.Fatalf("after the agent's cgroup was killed: processes %v, want the container %d still running", ps, ctr)
	}
	a.Start()
	noDuplicateUntil(t, a, marker, "the same container Running after the agent came back", func() (bool, string) {
		p, ok := a.Pod(a.Static("cg"))
		s, _ := containerStatus(p, "main")
		return ok && s.ContainerID == before.ContainerID && s.State.Running != nil && s.RestartCount == before.RestartCount, describe(p, ok)
	})
}

// agentPid finds the running agent of a by its root dir in its command line.
func agentPid(t *testing.T, a *harness.Agent) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 2 && filepath.Base(args[0]) == "minilet" && args[1] == "run" && bytes.Contains(cmd, []byte(a.RootDir)) {
			return pid
		}
	}
	t.Fatal("the agent's process was not found")
	return 0
}

// TestExecProbesOf30PodsStartingAtOnce: 30 pods with an exec liveness probe
// and the default 1 s timeout, started at once, make no false restart (the
// timeout measures the command, not entering the container).
func TestExecProbesOf30PodsStartingAtOnce(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	const n = 30
	for i := 0; i < n; i++ {
		a.WriteManifest(fmt.Sprintf("probe%d.yaml", i), fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: probe%d}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    livenessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
      timeoutSeconds: 1
      failureThreshold: 1
`, i))
	}
	restarts := func() (int, int, string) {
		running, restarted, detail := 0, 0, ""
		for i := 0; i < n; i++ {
			p, ok := a.Pod(a.Static(fmt.Sprintf("probe%d", i)))
			s, _ := containerStatus(p, "main")
			if ok && s.State.Running != nil {
				running++
			}
			if s.RestartCount > 0 {
				restarted++
				detail = describe(p, ok)
			}
		}
		return running, restarted, detail
	}
	a.Eventually("30 pods Running", func() (bool, string) {
		running, restarted, detail := restarts()
		if restarted > 0 {
			t.Fatalf("%d pods restarted by their liveness probe while starting: %s", restarted, detail)
		}
		return running == n, fmt.Sprintf("%d running", running)
	})
	// Ten more probe periods each.
	until := time.Now().Add(10 * time.Second)
	a.Eventually("ten probe periods without a restart", func() (bool, string) {
		if _, restarted, detail := restarts(); restarted > 0 {
			t.Fatalf("%d pods restarted by their liveness probe: %s", restarted, detail)
		}
		return time.Now().After(until), "waiting"
	})
}
