package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/test/harness"
)

// The agent on containerd, through the CRI socket. These tests share one
// containerd (MINILET_CONTAINERD_ENDPOINT, started by `make test`) with
// other packages' tests, so every pod name is unique to its test, and the
// harness removes the agent's sandboxes when the test ends.

// containerdAgent starts an agent on the shared containerd.
func containerdAgent(t *testing.T) *harness.Agent {
	t.Helper()
	requireRoot(t)
	harness.ContainerdEndpoint(t)
	a := harness.New(t)
	a.UseContainerd()
	a.Start()
	return a
}

// criClient connects the test itself to the shared containerd, to check
// what the runtime sees independently of the agent.
func criClient(t *testing.T) *remote.Runtime {
	t.Helper()
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: harness.ContainerdEndpoint(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func TestContainerdProbedWebServerBecomesReady(t *testing.T) {
	a := containerdAgent(t)
	port := harness.FreePort(t)
	a.WriteManifest("cweb.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: cweb}
spec:
  hostNetwork: true
  containers:
  - name: httpd
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "echo serving; exec httpd -f -p 127.0.0.1:%d -h /var/www"]
    readinessProbe:
      httpGet: {host: 127.0.0.1, port: %d, path: /index.html}
      periodSeconds: 1
    livenessProbe:
      exec: {command: ["/bin/sh", "-c", "test -f /var/www/index.html"]}
      periodSeconds: 1
`, harness.BusyboxImage, port, port))
	name := a.Static("cweb")
	a.Eventually("cweb Running and Ready on containerd", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "httpd")
		return ok && p.Status.Phase == v1.PodRunning && s.Ready && s.State.Running != nil, describe(p, ok)
	})
	p, _ := a.Pod(name)
	s, _ := containerStatus(p, "httpd")
	if !strings.HasPrefix(s.ContainerID, "containerd://") {
		t.Errorf("containerID = %q, want containerd://...", s.ContainerID)
	}
	if s.ImageID == "" || !strings.Contains(s.Image, "minilet.test/busybox") {
		t.Errorf("image %q imageID %q, want the busybox image and its ID", s.Image, s.ImageID)
	}
	a.Eventually("the container's log through the API", func() (bool, string) {
		var out string
		err := a.Get("/containerLogs/default/"+name+"/httpd", &out)
		return err == nil && strings.Contains(out, "serving"), fmt.Sprint(out, err)
	})
	// The container runs in containerd, not as a child of the agent.
	rt := criClient(t)
	id := strings.TrimPrefix(s.ContainerID, "containerd://")
	st, err := rt.ContainerStatus(context.Background(), id, false)
	if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("containerd's view of %s: %v, %v; want RUNNING", id, st, err)
	}
}

func TestContainerdCrashLoopKeepsTheExitCode(t *testing.T) {
	a := containerdAgent(t)
	a.WriteManifest("ccrash.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: ccrash}
spec:
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["/bin/sh", "-c", "echo dying; exit 3"]}
`, harness.BusyboxImage))
	name := a.Static("ccrash")
	a.Eventually("CrashLoopBackOff with exit code 3 in lastState", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		w := s.State.Waiting
		last := s.LastTerminationState.Terminated
		return ok && w != nil && w.Reason == "CrashLoopBackOff" && last != nil && last.ExitCode == 3 &&
			last.Reason == "Error" && s.RestartCount >= 1, describe(p, ok)
	})
}

func TestContainerdOOMKill(t *testing.T) {
	a := containerdAgent(t)
	a.WriteManifest("coom.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: coom}
spec:
  restartPolicy: Never
  containers:
  - name: hog
    image: %s
    imagePullPolicy: IfNotPresent
    # tail buffers a line that never ends: memory grows until the limit.
    command: ["tail", "/dev/zero"]
    resources:
      limits: {memory: 32Mi}
`, harness.BusyboxImage))
	name := a.Static("coom")
	a.Eventually("the hog OOMKilled with exit code 137", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "hog")
		term := s.State.Terminated
		return ok && term != nil && term.Reason == "OOMKilled" && term.ExitCode == 137 && p.Status.Phase == v1.PodFailed, describe(p, ok)
	})
}

func TestContainerdAgentRestartKeepsContainersRunning(t *testing.T) {
	a := containerdAgent(t)
	a.WriteManifest("ckeep.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: ckeep}
spec:
  initContainers:
  - {name: once, image: %[1]s, imagePullPolicy: IfNotPresent, command: ["true"]}
  containers:
  - {name: main, image: %[1]s, imagePullPolicy: IfNotPresent, command: ["sleep", "1000"]}
`, harness.BusyboxImage))
	name := a.Static("ckeep")
	var before, init v1.ContainerStatus
	a.Eventually("ckeep Running", func() (bool, string) {
		p, ok := a.Pod(name)
		before, _ = containerStatus(p, "main")
		init, _ = containerStatus(p, "once")
		return ok && p.Status.Phase == v1.PodRunning && before.State.Running != nil && init.State.Terminated != nil, describe(p, ok)
	})
	rt := criClient(t)
	id := strings.TrimPrefix(before.ContainerID, "containerd://")
	startedAt := func() int64 {
		st, err := rt.ContainerStatus(context.Background(), id, false)
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("containerd's view of %s: %v, %v; want RUNNING", id, st, err)
		}
		return st.GetStatus().GetStartedAt()
	}
	started := startedAt()

	a.Stop()
	if got := startedAt(); got != started {
		t.Fatalf("stopping the agent restarted the container (startedAt %d, then %d)", started, got)
	}
	a.Start()
	a.Eventually("the same container Running after the restart", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		i, _ := containerStatus(p, "once")
		return ok && p.Status.Phase == v1.PodRunning && s.ContainerID == before.ContainerID && s.RestartCount == 0 &&
			s.State.Running != nil && i.ContainerID == init.ContainerID, describe(p, ok)
	})
	if got := startedAt(); got != started {
		t.Errorf("the agent restart restarted the container (startedAt %d, then %d)", started, got)
	}
	list, err := rt.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(mustPod(t, a, name).UID)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Errorf("containerd has %d containers for the pod, want 2 (init + main, none re-created): %v", len(list), list)
	}
}

func mustPod(t *testing.T, a *harness.Agent, name string) v1.Pod {
	t.Helper()
	p, ok := a.Pod(name)
	if !ok {
		t.Fatalf("pod %s not listed", name)
	}
	return p
}

// TestContainerdRestartWhilePodsRun runs the agent on a containerd of the
// test's own (the shared one is never restarted), stops containerd while a
// pod runs, and checks that the node turns NotReady naming the runtime,
// then Ready again once containerd is back, with the pod's container
// neither restarted nor re-created.
func TestContainerdRestartWhilePodsRun(t *testing.T) {
	requireRoot(t)
	harness.ContainerdEndpoint(t) // CI has containerd; without it, skip
	if testing.Short() {
		t.Skip("starts a private containerd")
	}
	state, ep := privateContainerd(t)
	a := harness.New(t)
	a.ExtraArgs = append(a.ExtraArgs, "--container-runtime-endpoint", ep)
	a.Start()
	a.WriteManifest("crestart.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: crestart}
spec:
  hostNetwork: true
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["sleep", "1000"]}
`, harness.BusyboxImage))
	name := a.Static("crestart")
	var before v1.ContainerStatus
	a.Eventually("crestart Running", func() (bool, string) {
		p, ok := a.Pod(name)
		before, _ = containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodRunning && before.State.Running != nil, describe(p, ok)
	})

	stopContainerd(t, state)
	a.Eventually("the node NotReady because the runtime is down", func() (bool, string) {
		c := nodeReady(t, a)
		return c.Status == v1.ConditionFalse && strings.Contains(c.Message, "container runtime is down"), fmt.Sprintf("%+v", c)
	})

	if out, err := exec.Command(scriptPath("containerd-up.sh"), state).CombinedOutput(); err != nil {
		t.Fatalf("restarting containerd: %v\n%s", err, out)
	}
	a.Eventually("the node Ready again", func() (bool, string) {
		c := nodeReady(t, a)
		return c.Status == v1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	a.Eventually("the same container Running, not restarted", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && p.Status.Phase == v1.PodRunning && s.State.Running != nil &&
			s.ContainerID == before.ContainerID && s.RestartCount == 0, describe(p, ok)
	})
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	list, err := rt.ListContainers(context.Background(), nil)
	if err != nil || len(list) != 1 || list[0].GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("containerd's containers after the restart: %v, %v; want the one running container", list, err)
	}
}

// nodeReady returns the agent's node Ready condition.
func nodeReady(t *testing.T, a *harness.Agent) v1.NodeCondition {
	var node v1.Node
	if err := a.Get("/node", &node); err != nil {
		return v1.NodeCondition{Message: err.Error()}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c
		}
	}
	return v1.NodeCondition{Message: "no Ready condition"}
}

// scriptPath returns the path of a script in the repository's scripts/.
func scriptPath(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", name)
}

// privateContainerd starts a containerd of the test's own with
// scripts/containerd-up.sh and removes it, with everything it ran, when
// the test ends.
func privateContainerd(t *testing.T) (state, endpoint string) {
	t.Helper()
	state, err := os.MkdirTemp("", "mlt-cd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(scriptPath("containerd-down.sh"), state).CombinedOutput(); err != nil {
			t.Errorf("containerd-down.sh: %v\n%s", err, out)
		}
	})
	cmd := exec.Command(scriptPath("containerd-up.sh"), state)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("containerd-up.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return state, lines[len(lines)-1]
}

// stopContainerd ends a private containerd as a restart does (SIGTERM);
// its shims and containers keep running.
func stopContainerd(t *testing.T, state string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping containerd %d: %v", pid, err)
	}
	harness.Eventually(t, "containerd to exit", func() (bool, string) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z "), string(b)
	})
}

func TestContainerdExecLivenessFailureRestartsTheContainer(t *testing.T) {
	a := containerdAgent(t)
	dir := t.TempDir()
	healthy := filepath.Join(dir, "healthy")
	if err := os.WriteFile(healthy, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The probe reads a file the test controls, through a hostPath mount.
	a.WriteManifest("clive.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: clive}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: probe, hostPath: {path: %s}}
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "1000"]
    volumeMounts:
    - {name: probe, mountPath: /probe}
    livenessProbe:
      exec: {command: ["cat", "/probe/healthy"]}
      periodSeconds: 1
      failureThreshold: 2
`, dir, harness.BusyboxImage))
	name := a.Static("clive")
	a.Eventually("clive Running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	if err := os.Remove(healthy); err != nil {
		t.Fatal(err)
	}
	a.Eventually("a restart after the liveness probe failed", func() (bool, string) {
		p, ok := a.Pod(name)
		s, _ := containerStatus(p, "main")
		return ok && s.RestartCount >= 1, describe(p, ok)
	})
	if err := os.WriteFile(healthy, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Eventually("Unhealthy and Killing events", func() (bool, string) {
		evs := a.Events("default/" + name)
		return hasEvent(evs, v1.EventTypeWarning, "Unhealthy", "Liveness probe failed") &&
			hasEvent(evs, v1.EventTypeNormal, "Killing", "failed liveness probe, will be restarted"), eventSummary(evs)
	})
}

func TestContainerdDevicePluginEnvIsInjected(t *testing.T) {
	a := containerdAgent(t)
	a.StartPlugin("example.com/dev", "d1", "d2")
	a.Eventually("the node advertises example.com/dev", func() (bool, string) {
		n := a.Node()
		q := n.Status.Allocatable[v1.ResourceName("example.com/dev")]
		return q.Value() == 2, fmt.Sprint(n.Status.Allocatable)
	})
	a.WriteManifest("cdev.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: cdev}
spec:
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "echo devices=$EXAMPLE_DEVICES; exec sleep 1000"]
    resources: {limits: {example.com/dev: 1}}
`, harness.BusyboxImage))
	name := a.Static("cdev")
	a.Eventually("the container logs the device it was given", func() (bool, string) {
		var s string
		err := a.Get("/containerLogs/default/"+name+"/main", &s)
		return err == nil && (strings.Contains(s, "devices=d1") || strings.Contains(s, "devices=d2")), fmt.Sprint(s, err)
	})
}

func TestContainerdCgroupsFollowQoS(t *testing.T) {
	a := containerdAgent(t)
	a.WriteManifest("cburst.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: cburst}
spec:
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "cat /proc/self/cgroup; exec sleep 1000"]
    resources: {requests: {cpu: 100m, memory: 16Mi}, limits: {memory: 64Mi}}
`, harness.BusyboxImage))
	name := a.Static("cburst")
	var p v1.Pod
	a.Eventually("cburst Running", func() (bool, string) {
		var ok bool
		p, ok = a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning && p.Status.QOSClass == v1.PodQOSBurstable, describe(p, ok)
	})
	if p.Status.PodIP == "" || p.Status.PodIP == p.Status.HostIP {
		t.Errorf("pod IP %q (host IP %q): want an address of its own from the CNI network", p.Status.PodIP, p.Status.HostIP)
	}
	s, _ := containerStatus(p, "main")
	id := strings.TrimPrefix(s.ContainerID, "containerd://")
	podCgroup := a.CgroupRoot + "/kubepods/burstable/pod" + string(p.UID)
	a.Eventually("the container runs in its own cgroup under the pod's burstable cgroup", func() (bool, string) {
		var out string
		err := a.Get("/containerLogs/default/"+name+"/main", &out)
		return err == nil && strings.Contains(out, "memory:"+podCgroup+"/"+id), out
	})
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", podCgroup, id, "memory.limit_in_bytes"))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(64<<20) {
		t.Errorf("container memory.limit_in_bytes = %q (%v), want %d", b, err, 64<<20)
	}
	b, err = os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", podCgroup, "cpu.shares"))
	if err != nil || strings.TrimSpace(string(b)) != "102" {
		t.Errorf("pod cpu.shares = %q (%v), want 102 for a 100m request", b, err)
	}
}

func TestContainerdDeletingTheManifestRemovesThePod(t *testing.T) {
	a := containerdAgent(t)
	a.WriteManifest("cgone.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: cgone}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["sleep", "1000"]}
`, harness.BusyboxImage))
	name := a.Static("cgone")
	var p v1.Pod
	a.Eventually("cgone Running", func() (bool, string) {
		var ok bool
		p, ok = a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.RemoveManifest("cgone.yaml")
	a.Eventually("cgone gone from the agent", func() (bool, string) {
		q, ok := a.Pod(name)
		return !ok, describe(q, ok)
	})
	rt := criClient(t)
	a.Eventually("no running container or ready sandbox left in containerd", func() (bool, string) {
		sel := map[string]string{"io.kubernetes.pod.uid": string(p.UID)}
		ctrs, err := rt.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: sel,
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			return false, err.Error()
		}
		sbs, err := rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{LabelSelector: sel,
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
		if err != nil {
			return false, err.Error()
		}
		return len(ctrs) == 0 && len(sbs) == 0, fmt.Sprintf("%d running containers, %d ready sandboxes", len(ctrs), len(sbs))
	})
}

// TestContainerdContainerHasItsOwnPIDNamespace: on containerd a
// container's PID 1 is its own process, not the pod's pause process (the
// runtime reads each container's namespace options; without them it puts
// the container in the pod's PID namespace), while with
// shareProcessNamespace it is the pause process.
func TestContainerdContainerHasItsOwnPIDNamespace(t *testing.T) {
	rt := podRuntimes()[1]
	a := rt.start(t)
	cmd := `command: ["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline > /dev/termination-log; exit 3"]`
	a.WriteManifest("own.yaml", rt.manifest("pid-own", "", cmd))
	a.WriteManifest("shared.yaml", rt.manifest("pid-shared", "  shareProcessNamespace: true\n", cmd))
	for name, want := range map[string]string{"pid-own": "sh -c", "pid-shared": "/pause"} {
		pod := a.Static(name)
		a.Eventually(name+": PID 1 is "+want, func() (bool, string) {
			p, ok := a.Pod(pod)
			s, _ := containerStatus(p, "main")
			term := s.State.Terminated
			return ok && term != nil && strings.HasPrefix(term.Message, want), describe(p, ok)
		})
	}
}
