package kuberuntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

func TestSyncPodStartsSandboxAndContainers(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a", "b")
	pod.Labels = map[string]string{"app": "web"}
	res := e.sync(pod)
	if res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("sync: %+v", res)
	}
	v := e.status(pod)
	if len(v.ps.Sandboxes) != 1 || v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_READY || v.ps.Sandboxes[0].IP == "" {
		t.Fatalf("sandboxes = %+v", v.ps.Sandboxes)
	}
	for _, n := range []string{"a", "b"} {
		if v.state(n) != container.StateRunning {
			t.Fatalf("container %s is %q, want running", n, v.state(n))
		}
		if !e.rec.Has("Normal Created Created container: "+n) || !e.rec.Has("Normal Started Started container "+n) {
			t.Fatalf("missing Created/Started events for %s:\n%s", n, e.rec)
		}
	}
	// The sandbox carries the pod's labels and the kubelet's keys, and
	// logs to LogRoot/<ns>_<name>_<uid>, which exists.
	sb := e.rt.Sandboxes[v.ps.Sandboxes[0].ID]
	if sb.Labels["app"] != "web" || sb.Labels[labelPodUID] != "uid-1" {
		t.Fatalf("sandbox labels = %v", sb.Labels)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.LogRoot, "default_web_uid-1", "a")); err != nil {
		t.Fatalf("container log dir: %v", err)
	}
	// A second sync with nothing changed does nothing.
	before := len(e.rt.GetCalls())
	if res := e.sync(pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, c := range e.rt.GetCalls()[before:] {
		if c == "CreateContainer" || c == "StopContainer" || c == "RunPodSandbox" {
			t.Fatalf("idle sync called %s", c)
		}
	}
}

func TestContainerConfig(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.NodeName = "node1"
	c := &pod.Spec.Containers[0]
	c.Command = []string{"/bin/sh", "-c", "echo $(GREETING) $$(HOME) $(MISSING)"}
	c.Args = []string{"$(POD)"}
	c.WorkingDir = "/tmp"
	c.Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi"), v1.ResourceCPU: resource.MustParse("250m")}
	c.Env = []v1.EnvVar{
		{Name: "NAME", Value: "world"},
		{Name: "GREETING", Value: "hello $(NAME)"},
		{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "UID", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "HOST_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "MEM_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "CPU_REQ_M", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
	}
	if res := e.sync(pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	fc := e.rt.Containers[e.status(pod).ps.FindContainer("a").ID.ID]
	// The fake runtime keeps labels and annotations but not the whole
	// config, so check the config the manager generates for that start.
	cfg, err := e.m.containerConfig(context.Background(), pod, c, 0, "192.168.192.168")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range cfg.Envs {
		env[kv.Key] = string(kv.Value)
	}
	want := map[string]string{"NAME": "world", "GREETING": "hello world", "POD": "web", "NS": "default", "UID": "uid-1", "NODE": "node1",
		"POD_IP": "192.168.192.168", "HOST_IP": "192.0.2.10", "MEM_MI": "64", "CPU": "1", "CPU_REQ_M": "0"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if got := strings.Join(cfg.Command, "|"); got != "/bin/sh|-c|echo hello world $(HOME) $(MISSING)" {
		t.Errorf("command = %q", got)
	}
	if got := strings.Join(cfg.Args, "|"); got != "web" {
		t.Errorf("args = %q", got)
	}
	if cfg.WorkingDir != "/tmp" || cfg.LogPath != "a/0.log" || cfg.Labels[labelContainerName] != "a" || cfg.Annotations[annotationRestartCount] != "0" {
		t.Errorf("config = %+v", cfg)
	}
	if fc.Labels[labelPodName] != "web" || fc.Annotations[annotationHash] == "" {
		t.Errorf("runtime container labels %v annotations %v", fc.Labels, fc.Annotations)
	}
}

type cgroupsStub struct{}

func (cgroupsStub) CgroupParent(*v1.Pod) string { return "/minilet/kubepods/besteffort/poduid-1" }
func (cgroupsStub) ContainerResources(*v1.Pod, *v1.Container) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{CpuShares: 2}
}

type devicesStub struct{ err error }

func (d devicesStub) RunOptions(*v1.Pod, *v1.Container) (*container.RunOptions, error) {
	if d.err != nil {
		return nil, d.err
	}
	return &container.RunOptions{Envs: []*runtimeapi.KeyValue{{Key: "DEV", Value: []byte("dev0")}},
		Devices: []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/dev0", Permissions: "rw"}}}, nil
}

func TestHooksReachTheRuntime(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PodCgroups = cgroupsStub{}; c.ContainerOptions = devicesStub{} })
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	if res := e.sync(pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	v := e.status(pod)
	if got := e.rt.Containers[v.ps.FindContainer("a").ID.ID].LinuxResources.GetCpuShares(); got != 2 {
		t.Fatalf("cpu shares = %d, want the PodCgroups hook's 2", got)
	}
	sbCfg := e.m.sandboxConfig(pod, 0)
	if sbCfg.Linux.CgroupParent != "/minilet/kubepods/besteffort/poduid-1" {
		t.Fatalf("cgroup parent = %q", sbCfg.Linux.CgroupParent)
	}
	cfg, err := e.m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], 0, "")
	if err != nil || len(cfg.Devices) != 1 || string(cfg.Envs[len(cfg.Envs)-1].Value) != "dev0" {
		t.Fatalf("device options not applied: %v %+v", err, cfg)
	}

	// A device allocation failure is a CreateContainerConfigError.
	e2 := newEnv(t, func(c *Config) { c.ContainerOptions = devicesStub{err: errors.New("no free example.com/gpu")} })
	res := e2.sync(pod)
	if w := res.Waiting["a"]; w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "no free example.com/gpu") || res.Err == nil {
		t.Fatalf("result = %+v", res)
	}
}

func TestCrashLoopBackOff(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	e.sync(pod)
	e.exit(pod, "a", 1)

	// The first crash restarts at once.
	if res := e.sync(pod); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("first restart: %+v", res)
	}
	v := e.status(pod)
	if v.attempts("a") != 2 || v.ps.FindContainer("a").RestartCount != 1 || v.state("a") != container.StateRunning {
		t.Fatalf("after first crash: %d attempts, newest %+v", v.attempts("a"), v.ps.FindContainer("a"))
	}
	if e.rt.Containers[v.ps.FindContainer("a").ID.ID].Annotations[annotationRestartCount] != "1" {
		t.Fatalf("restart count annotation not 1")
	}

	// The second crash waits 10s, then 20s, doubling.
	for _, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		e.exit(pod, "a", 1)
		res := e.sync(pod)
		w := res.Waiting["a"]
		wantMsg := "back-off " + delay.String() + " restarting failed container=a pod=web_default(uid-1)"
		if w.Reason != "CrashLoopBackOff" || w.Message != wantMsg {
			t.Fatalf("waiting = %+v, want CrashLoopBackOff %q", w, wantMsg)
		}
		if res.RequeueAfter != delay || res.Err != nil {
			t.Fatalf("requeueAfter = %v err %v, want %v", res.RequeueAfter, res.Err, delay)
		}
		if !e.rec.Has("Warning BackOff Back-off restarting failed container a in pod web_default(uid-1)") {
			t.Fatalf("no BackOff event:\n%s", e.rec)
		}
		n := e.status(pod).attempts("a")
		e.clock.Step(delay - time.Second)
		if res := e.sync(pod); res.Waiting["a"].Reason != "CrashLoopBackOff" || e.status(pod).attempts("a") != n {
			t.Fatalf("restarted before the back-off ended")
		}
		e.clock.Step(time.Second)
		if res := e.sync(pod); len(res.Waiting) != 0 || e.status(pod).attempts("a") != n+1 {
			t.Fatalf("not restarted once the back-off ended: %+v", res)
		}
	}
}

func TestRestartPolicies(t *testing.T) {
	cases := []struct {
		policy  v1.RestartPolicy
		exit    int32
		restart bool
	}{
		{v1.RestartPolicyAlways, 0, true},
		{v1.RestartPolicyAlways, 1, true},
		{v1.RestartPolicyOnFailure, 0, false},
		{v1.RestartPolicyOnFailure, 1, true},
		{v1.RestartPolicyNever, 0, false},
		{v1.RestartPolicyNever, 1, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy)+"/"+string(rune('0'+tc.exit)), func(t *testing.T) {
			e := newEnv(t)
			pod := mkPod(tc.policy, nil, "a")
			e.sync(pod)
			e.exit(pod, "a", tc.exit)
			e.sync(pod)
			v := e.status(pod)
			if got := v.attempts("a") == 2; got != tc.restart {
				t.Fatalf("restarted = %v, want %v", got, tc.restart)
			}
			if !tc.restart && v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Fatalf("a finished pod's sandbox should be stopped")
			}
		})
	}
}

func TestInitContainersRunInOrder(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, []v1.Container{initC("i1", false), initC("i2", false)}, "a")
	e.sync(pod)
	if v := e.status(pod); v.state("i1") != container.StateRunning || v.attempts("i2")+v.attempts("a") != 0 {
		t.Fatalf("first sync: %+v", v.ps.Containers)
	}
	e.sync(pod) // i1 still running: nothing new
	if v := e.status(pod); v.attempts("i2") != 0 {
		t.Fatalf("i2 started while i1 runs")
	}
	e.exit(pod, "i1", 1) // fails: retried under Always
	e.sync(pod)
	if v := e.status(pod); v.attempts("i1") != 2 || v.attempts("i2") != 0 {
		t.Fatalf("failed i1 not retried first")
	}
	e.exit(pod, "i1", 0)
	e.sync(pod)
	if v := e.status(pod); v.state("i2") != container.StateRunning || v.attempts("a") != 0 {
		t.Fatalf("i2 should run now")
	}
	e.exit(pod, "i2", 0)
	e.sync(pod)
	if v := e.status(pod); v.state("a") != container.StateRunning {
		t.Fatalf("app should run once init is done")
	}
}

func TestFailedInitContainerFailsNeverPod(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyNever, []v1.Container{initC("i1", false)}, "a")
	e.sync(pod)
	e.exit(pod, "i1", 2)
	e.sync(pod)
	v := e.status(pod)
	if v.attempts("i1") != 1 || v.attempts("a") != 0 {
		t.Fatalf("never pod retried init or started apps: %+v", v.ps.Containers)
	}
	if v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("failed pod's sandbox still ready")
	}
}

func TestSidecarStartsBeforeNextInit(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, []v1.Container{initC("side", true), initC("i1", false)}, "a")
	e.sync(pod)
	if v := e.status(pod); v.state("side") != container.StateRunning || v.attempts("i1") != 0 {
		t.Fatalf("first sync should start only the sidecar")
	}
	e.sync(pod)
	if v := e.status(pod); v.state("i1") != container.StateRunning {
		t.Fatalf("i1 should start once the sidecar runs")
	}
	e.exit(pod, "i1", 0)
	e.sync(pod)
	if v := e.status(pod); v.state("a") != container.StateRunning || v.state("side") != container.StateRunning {
		t.Fatalf("app and sidecar should run")
	}
}

func TestSpecChangeRestarts(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	e.sync(pod)
	old := e.status(pod).ps.FindContainer("a").ID.ID
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", Value: "2"}}
	e.sync(pod)
	if !e.rec.Has("Normal Killing Container a definition changed, will be restarted") {
		t.Fatalf("no Killing event:\n%s", e.rec)
	}
	v := e.status(pod)
	if cur := v.ps.FindContainer("a"); cur.ID.ID == old || cur.State != container.StateRunning || cur.RestartCount != 1 {
		t.Fatalf("not restarted with the new spec: %+v", cur)
	}
	if to, ok := e.rt.timeout(old); !ok || to != 30 {
		t.Fatalf("old container stopped with timeout %d (%v), want the default 30", to, ok)
	}
}

type liveStub struct{ id string }

func (l *liveStub) LivenessFailed(id container.ID) bool { return id.ID == l.id }
func (l *liveStub) StartupFailed(container.ID) bool     { return false }
func (l *liveStub) StartupSucceeded(container.ID) bool  { return true }

func TestLivenessFailureRestarts(t *testing.T) {
	probes := &liveStub{}
	e := newEnv(t)
	e.probes = probes
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	grace := int64(7)
	pod.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: &grace}
	e.sync(pod)
	probes.id = e.status(pod).ps.FindContainer("a").ID.ID
	e.sync(pod)
	if !e.rec.Has("Normal Killing Container a failed liveness probe, will be restarted") {
		t.Fatalf("no Killing event:\n%s", e.rec)
	}
	if to, _ := e.rt.timeout(probes.id); to != 7 {
		t.Fatalf("stop timeout = %d, want the probe's 7", to)
	}
	if cur := e.status(pod).ps.FindContainer("a"); cur.ID.ID == probes.id || cur.State != container.StateRunning {
		t.Fatalf("not restarted: %+v", cur)
	}
}

func TestKillPodGracePeriod(t *testing.T) {
	cases := []struct {
		name     string
		grace    *int64
		hookTime time.Duration
		override *int64
		want     int64
	}{
		{name: "default 30", want: 30},
		{name: "pod's own", grace: ptr(int64(12)), want: 12},
		{name: "minus preStop time", grace: ptr(int64(30)), hookTime: 25 * time.Second, want: 5},
		{name: "at least 2 after preStop", grace: ptr(int64(30)), hookTime: 29 * time.Second, want: 2},
		{name: "override wins", grace: ptr(int64(30)), override: ptr(int64(0)), want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.rt.onExec = func() { e.clock.Step(tc.hookTime) }
			// One container: containers stop in parallel, and their
			// preStop hooks would step the shared fake clock together.
			pod := mkPod(v1.RestartPolicyAlways, nil, "a")
			pod.Spec.TerminationGracePeriodSeconds = tc.grace
			for i := range pod.Spec.Containers {
				pod.Spec.Containers[i].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
			}
			e.sync(pod)
			ps := e.status(pod).ps
			if err := e.m.KillPod(context.Background(), pod, ps, tc.override); err != nil {
				t.Fatal(err)
			}
			for _, c := range ps.Containers {
				if to, ok := e.rt.timeout(c.ID.ID); !ok || to != tc.want {
					t.Fatalf("%s stopped with %d (%v), want %d", c.Name, to, ok, tc.want)
				}
			}
			if !e.rec.Has("Normal Killing Stopping container a") {
				t.Fatalf("missing Killing event:\n%s", e.rec)
			}
			v := e.status(pod)
			if v.state("a") != container.StateExited || v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Fatalf("pod not down: %+v %+v", v.ps.Containers, v.ps.Sandboxes)
			}
		})
	}
}

// An orphan (a pod an earlier run started whose manifest went away) is
// killed with the grace period and preStop hooks recorded on its
// containers, whether the caller passes no pod or a stub with only the
// pod's name (as the agent does).
func TestKillOrphanUsesRecordedGracePeriod(t *testing.T) {
	for _, stub := range []bool{false, true} {
		e := newEnv(t)
		hooks := 0
		e.rt.onExec = func() { hooks++; e.clock.Step(4 * time.Second) }
		pod := mkPod(v1.RestartPolicyAlways, nil, "a", "b")
		pod.Spec.TerminationGracePeriodSeconds = ptr(int64(9))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
		e.sync(pod)
		ps := e.status(pod).ps
		var orphan *v1.Pod
		if stub {
			now := metav1.Now()
			orphan = &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, DeletionTimestamp: &now}}
		}
		if err := e.m.KillPod(context.Background(), orphan, ps, nil); err != nil {
			t.Fatal(err)
		}
		if hooks != 1 {
			t.Fatalf("stub=%v: preStop hook ran %d times, want once", stub, hooks)
		}
		for n, want := range map[string]int64{"a": 5, "b": 9} { // a: 9 less its 4s hook
			if to, _ := e.rt.timeout(ps.FindContainer(n).ID.ID); to != want {
				t.Fatalf("stub=%v: orphan container %s stopped with %d, want %d", stub, n, to, want)
			}
			if !e.rec.Has("Normal Killing Stopping container " + n) {
				t.Fatalf("missing Killing event for %s:\n%s", n, e.rec)
			}
		}
		v := e.status(pod)
		if v.state("a") != container.StateExited || v.state("b") != container.StateExited || v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Fatalf("orphan not down: %+v %+v", v.ps.Containers, v.ps.Sandboxes)
		}
	}
}

func TestPreStopFailureEvent(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	e.sync(pod)
	e.rt.InjectError("ExecSync", errors.New("exit status 1"))
	if err := e.m.KillPod(context.Background(), pod, e.status(pod).ps, nil); err != nil {
		t.Fatal(err)
	}
	if !e.rec.Has("Warning FailedPreStopHook") {
		t.Fatalf("no FailedPreStopHook event:\n%s", e.rec)
	}
}

func TestPostStartFailureKillsContainer(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	e.rt.InjectError("ExecSync", errors.New("exit status 1"))
	res := e.sync(pod)
	if !e.rec.Has("Warning FailedPostStartHook") || res.Err == nil {
		t.Fatalf("no FailedPostStartHook event or error:\n%s", e.rec)
	}
	if e.status(pod).state("a") != container.StateExited {
		t.Fatalf("container with failed postStart still runs")
	}
}

func TestSandboxChangedRecreates(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	e.sync(pod)
	ps := e.status(pod).ps
	if err := e.rt.StopPodSandbox(context.Background(), ps.Sandboxes[0].ID); err != nil {
		t.Fatal(err)
	}
	e.sync(pod)
	if !e.rec.Has("Normal SandboxChanged Pod sandbox changed, it will be killed and re-created.") {
		t.Fatalf("no SandboxChanged event:\n%s", e.rec)
	}
	v := e.status(pod)
	if len(v.ps.Sandboxes) != 2 || v.ps.Sandboxes[0].Attempt != 1 || v.ps.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandboxes = %+v", v.ps.Sandboxes)
	}
	if cur := v.ps.FindContainer("a"); cur.State != container.StateRunning || cur.RestartCount != 1 {
		t.Fatalf("container not restarted in the new sandbox: %+v", cur)
	}
}

func ptr[T any](v T) *T { return &v }
