package status

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testPod(policy v1.RestartPolicy, inits []string, apps ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}
	p.Spec.RestartPolicy = policy
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "host"})
	}
	for _, n := range apps {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "host"})
	}
	return p
}

func running(name string, created time.Time) *container.ContainerStatus {
	return &container.ContainerStatus{ID: container.ID{Type: "containerd", ID: name + "-id-" + created.Format("150405")}, Name: name, State: container.StateRunning,
		CreatedAt: created, StartedAt: created, Image: "host", ImageRef: "sha256:host"}
}

func exited(name string, created time.Time, code int32, restarts int) *container.ContainerStatus {
	c := running(name, created)
	c.State, c.ExitCode, c.FinishedAt, c.RestartCount = container.StateExited, code, created.Add(time.Second), restarts
	return c
}

func readySandbox() []*container.SandboxStatus {
	return []*container.SandboxStatus{{ID: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: t0, IP: "10.1.2.3"}}
}

func cond(s v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

func TestPhase(t *testing.T) {
	cases := []struct {
		name   string
		pod    *v1.Pod
		cs     []*container.ContainerStatus
		want   v1.PodPhase
		waitng map[string]container.Waiting
	}{
		{"nothing yet", testPod(v1.RestartPolicyAlways, nil, "a"), nil, v1.PodPending, nil},
		{"running", testPod(v1.RestartPolicyAlways, nil, "a"), []*container.ContainerStatus{running("a", t0)}, v1.PodRunning, nil},
		{"one of two running", testPod(v1.RestartPolicyAlways, nil, "a", "b"), []*container.ContainerStatus{running("a", t0)}, v1.PodPending, nil},
		{"never: success", testPod(v1.RestartPolicyNever, nil, "a"), []*container.ContainerStatus{exited("a", t0, 0, 0)}, v1.PodSucceeded, nil},
		{"never: failure", testPod(v1.RestartPolicyNever, nil, "a"), []*container.ContainerStatus{exited("a", t0, 1, 0)}, v1.PodFailed, nil},
		{"always: exited stays running", testPod(v1.RestartPolicyAlways, nil, "a"), []*container.ContainerStatus{exited("a", t0, 0, 0)}, v1.PodRunning, nil},
		{"onfailure: failed restarts", testPod(v1.RestartPolicyOnFailure, nil, "a"), []*container.ContainerStatus{exited("a", t0, 2, 0)}, v1.PodRunning, nil},
		{"onfailure: success", testPod(v1.RestartPolicyOnFailure, nil, "a"), []*container.ContainerStatus{exited("a", t0, 0, 0)}, v1.PodSucceeded, nil},
		{"crashloop is running", testPod(v1.RestartPolicyAlways, nil, "a"), []*container.ContainerStatus{exited("a", t0, 1, 3)}, v1.PodRunning,
			map[string]container.Waiting{"a": {Reason: "CrashLoopBackOff"}}},
		{"init running", testPod(v1.RestartPolicyAlways, []string{"i"}, "a"), []*container.ContainerStatus{running("i", t0)}, v1.PodPending, nil},
		{"init failed never", testPod(v1.RestartPolicyNever, []string{"i"}, "a"), []*container.ContainerStatus{exited("i", t0, 1, 0)}, v1.PodFailed, nil},
		{"init failed always retries", testPod(v1.RestartPolicyAlways, []string{"i"}, "a"), []*container.ContainerStatus{exited("i", t0, 1, 0)}, v1.PodPending, nil},
		{"init done app running", testPod(v1.RestartPolicyAlways, []string{"i"}, "a"),
			[]*container.ContainerStatus{exited("i", t0, 0, 0), running("a", t0.Add(time.Second))}, v1.PodRunning, nil},
		{"image pull error", testPod(v1.RestartPolicyAlways, nil, "a"), nil, v1.PodPending, map[string]container.Waiting{"a": {Reason: "ErrImagePull"}}},
		{"never: a restart rule matching keeps it running", withRestartRule(testPod(v1.RestartPolicyNever, nil, "a"), 42),
			[]*container.ContainerStatus{exited("a", t0, 42, 0)}, v1.PodRunning, nil},
		{"never: a restart rule not matching fails it", withRestartRule(testPod(v1.RestartPolicyNever, nil, "a"), 42),
			[]*container.ContainerStatus{exited("a", t0, 1, 0)}, v1.PodFailed, nil},
		// The container's own restart policy decides over the pod's
		// (upstream's spec "should restart container on container-level
		// restart policy Never").
		{"always: a container with restartPolicy Never fails it", withOwnPolicy(testPod(v1.RestartPolicyAlways, nil, "a"), v1.ContainerRestartPolicyNever),
			[]*container.ContainerStatus{exited("a", t0, 1, 0)}, v1.PodFailed, nil},
		{"always: a container with restartPolicy Never succeeds it", withOwnPolicy(testPod(v1.RestartPolicyAlways, nil, "a"), v1.ContainerRestartPolicyNever),
			[]*container.ContainerStatus{exited("a", t0, 0, 0)}, v1.PodSucceeded, nil},
		{"always: a container with restartPolicy OnFailure succeeds it", withOwnPolicy(testPod(v1.RestartPolicyAlways, nil, "a"), v1.ContainerRestartPolicyOnFailure),
			[]*container.ContainerStatus{exited("a", t0, 0, 0)}, v1.PodSucceeded, nil},
		{"never: a container with restartPolicy Always keeps it running", withOwnPolicy(testPod(v1.RestartPolicyNever, nil, "a"), v1.ContainerRestartPolicyAlways),
			[]*container.ContainerStatus{exited("a", t0, 1, 0)}, v1.PodRunning, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := &container.PodStatus{UID: "u1", Sandboxes: readySandbox(), Containers: tc.cs}
			s := Generator{}.Generate(tc.pod, rs, nil, tc.waitng, t0)
			if s.Phase != tc.want {
				t.Fatalf("phase = %s, want %s (statuses %+v)", s.Phase, tc.want, s.ContainerStatuses)
			}
		})
	}
}

func TestTerminalPhaseSticks(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, nil, "a")
	prev := &v1.PodStatus{Phase: v1.PodSucceeded}
	s := Generator{}.Generate(pod, &container.PodStatus{}, prev, nil, t0)
	if s.Phase != v1.PodSucceeded {
		t.Fatalf("phase = %s, want Succeeded kept from the previous status", s.Phase)
	}
}

func TestContainerStatusFields(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, nil, "a")
	old := exited("a", t0, 137, 0)
	old.Reason = "OOMKilled"
	cur := running("a", t0.Add(time.Minute))
	cur.RestartCount = 1
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{old, cur}}
	s := Generator{HostIP: "192.0.2.1"}.Generate(pod, rs, nil, nil, t0)
	cs := s.ContainerStatuses[0]
	if cs.ContainerID != "containerd://"+cur.ID.ID || cs.RestartCount != 1 || cs.ImageID != "sha256:host" {
		t.Fatalf("bad identity fields: %+v", cs)
	}
	if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(cur.StartedAt) {
		t.Fatalf("state = %+v, want running since %v", cs.State, cur.StartedAt)
	}
	lt := cs.LastTerminationState.Terminated
	if lt == nil || lt.ExitCode != 137 || lt.Reason != "OOMKilled" {
		t.Fatalf("lastState = %+v, want terminated OOMKilled 137", cs.LastTerminationState)
	}
	if !cs.Ready || cs.Started == nil || !*cs.Started {
		t.Fatalf("without a prober a running container is ready and started: %+v", cs)
	}
	if s.PodIP != "10.1.2.3" || len(s.PodIPs) != 1 || s.HostIP != "192.0.2.1" {
		t.Fatalf("ips: podIP %q podIPs %v hostIP %q", s.PodIP, s.PodIPs, s.HostIP)
	}
	if s.StartTime == nil || !s.StartTime.Time.Equal(t0) {
		t.Fatalf("startTime = %v, want %v", s.StartTime, t0)
	}
}

func TestWaitingReasonOverridesTerminated(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, nil, "a")
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{exited("a", t0, 1, 2)}}
	msg := "back-off 20s restarting failed container=a pod=web_default(u1)"
	s := Generator{}.Generate(pod, rs, nil, map[string]container.Waiting{"a": {Reason: "CrashLoopBackOff", Message: msg}}, t0)
	cs := s.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.State.Waiting.Message != msg {
		t.Fatalf("state = %+v, want waiting CrashLoopBackOff", cs.State)
	}
	if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 || cs.LastTerminationState.Terminated.Reason != "Error" {
		t.Fatalf("lastState = %+v, want the failed attempt", cs.LastTerminationState)
	}
	if cs.RestartCount != 2 {
		t.Fatalf("restartCount = %d, want 2", cs.RestartCount)
	}
}

func TestDefaultWaitingReasons(t *testing.T) {
	s := Generator{}.Generate(testPod(v1.RestartPolicyAlways, nil, "a"), nil, nil, nil, t0)
	if w := s.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Fatalf("state = %+v, want ContainerCreating", s.ContainerStatuses[0].State)
	}
	s = Generator{}.Generate(testPod(v1.RestartPolicyAlways, []string{"i"}, "a"), nil, nil, nil, t0)
	if w := s.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Fatalf("app state = %+v, want PodInitializing", s.ContainerStatuses[0].State)
	}
	if w := s.InitContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Fatalf("init state = %+v, want PodInitializing", s.InitContainerStatuses[0].State)
	}
}

func TestConditions(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, []string{"i"}, "a", "b")
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{running("i", t0)}}
	s := Generator{}.Generate(pod, rs, nil, nil, t0)
	wantOrder := []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled}
	for i, c := range s.Conditions {
		if c.Type != wantOrder[i] {
			t.Fatalf("condition %d is %s, want %s", i, c.Type, wantOrder[i])
		}
	}
	if c := cond(s, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" ||
		c.Message != "containers with incomplete status: [i]" {
		t.Fatalf("Initialized = %+v", c)
	}
	if c := cond(s, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotReady" ||
		c.Message != "containers with unready status: [a b]" {
		t.Fatalf("Ready = %+v", c)
	}
	if c := cond(s, v1.PodReadyToStartContainers); c.Status != v1.ConditionTrue {
		t.Fatalf("PodReadyToStartContainers = %+v", c)
	}

	// Init done and both apps running: everything True; transition times
	// move only for conditions whose status changed.
	later := t0.Add(time.Minute)
	rs.Containers = []*container.ContainerStatus{exited("i", t0, 0, 0), running("a", later), running("b", later)}
	s2 := Generator{}.Generate(pod, rs, &s, nil, later)
	for _, c := range s2.Conditions {
		if c.Status != v1.ConditionTrue {
			t.Fatalf("%s = %+v, want True", c.Type, c)
		}
	}
	if got := cond(s2, v1.PodReady).LastTransitionTime.Time; !got.Equal(later) {
		t.Fatalf("Ready changed at %v, want %v", got, later)
	}
	if got := cond(s2, v1.PodScheduled).LastTransitionTime.Time; !got.Equal(t0) {
		t.Fatalf("PodScheduled kept %v, want %v", got, t0)
	}
}

func TestSucceededPodCompleted(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, nil, "a")
	rs := &container.PodStatus{Sandboxes: []*container.SandboxStatus{{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, IP: ""}},
		Containers: []*container.ContainerStatus{exited("a", t0, 0, 0)}}
	prev := &v1.PodStatus{PodIP: "10.9.9.9"}
	s := Generator{}.Generate(pod, rs, prev, nil, t0)
	if c := cond(s, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Fatalf("Ready = %+v, want False PodCompleted", c)
	}
	if c := cond(s, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Fatalf("a stopped sandbox is not ready to start containers: %+v", c)
	}
	if s.PodIP != "10.9.9.9" {
		t.Fatalf("podIP = %q, want the previous IP kept once the sandbox is gone", s.PodIP)
	}
}

type fakeProber struct{}

func (fakeProber) UpdatePodStatus(_ *v1.Pod, s *v1.PodStatus) {
	for i := range s.ContainerStatuses {
		s.ContainerStatuses[i].Ready = s.ContainerStatuses[i].Name == "a"
	}
}

func TestProberDecidesReadiness(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, nil, "a", "b")
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{running("a", t0), running("b", t0)}}
	s := Generator{Probes: fakeProber{}}.Generate(pod, rs, nil, nil, t0)
	if c := cond(s, v1.ContainersReady); c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [b]" {
		t.Fatalf("ContainersReady = %+v", c)
	}
}

func TestGCdContainerKeepsTerminatedStatus(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, nil, "a")
	prev := Generator{}.Generate(pod, &container.PodStatus{Containers: []*container.ContainerStatus{exited("a", t0, 3, 0)}}, nil, nil, t0)
	s := Generator{}.Generate(pod, &container.PodStatus{}, &prev, nil, t0)
	if term := s.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 {
		t.Fatalf("state = %+v, want the terminated state kept", s.ContainerStatuses[0].State)
	}
}

func TestFailed(t *testing.T) {
	s := Failed(testPod(v1.RestartPolicyAlways, nil, "a"), "OutOfcpu", "Node didn't have enough resource: cpu", t0)
	if s.Phase != v1.PodFailed || s.Reason != "OutOfcpu" || s.Message != "Pod was rejected: Node didn't have enough resource: cpu" {
		t.Fatalf("status = %+v", s)
	}
}

func TestQOSClass(t *testing.T) {
	rl := func(kv ...string) v1.ResourceList {
		l := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	mk := func(rs ...v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{}
		for _, r := range rs {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c", Resources: r})
		}
		return p
	}
	cases := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"no resources", mk(v1.ResourceRequirements{}), v1.PodQOSBestEffort},
		{"only extended resource", mk(v1.ResourceRequirements{Limits: rl("example.com/gpu", "1")}), v1.PodQOSBestEffort},
		{"limits equal requests", mk(v1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi"), Requests: rl("cpu", "1", "memory", "1Gi")}), v1.PodQOSGuaranteed},
		{"limits only default requests", mk(v1.ResourceRequirements{Limits: rl("cpu", "500m", "memory", "64Mi")}), v1.PodQOSGuaranteed},
		{"request below limit", mk(v1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi"), Requests: rl("cpu", "500m", "memory", "1Gi")}), v1.PodQOSBurstable},
		{"cpu limit only", mk(v1.ResourceRequirements{Limits: rl("cpu", "1")}), v1.PodQOSBurstable},
		{"request only", mk(v1.ResourceRequirements{Requests: rl("memory", "10Mi")}), v1.PodQOSBurstable},
		{"one guaranteed one besteffort", mk(v1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi")}, v1.ResourceRequirements{}), v1.PodQOSBurstable},
	}
	for _, tc := range cases {
		if got := QOSClass(tc.pod); got != tc.want {
			t.Errorf("%s: QOSClass = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	pod := testPod(v1.RestartPolicyAlways, []string{"init"}, "a", "b", "c")
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{
		exited("init", t0, 0, 0), exited("a", t0, 1, 0), running("a", t0.Add(time.Minute)), running("b", t0), running("c", t0)}}
	prev := Generator{}.Generate(pod, rs, nil, nil, t0)
	b.ReportAllocs()
	for b.Loop() {
		_ = Generator{}.Generate(pod, rs, &prev, nil, t0)
	}
}

func TestSidecarPhase(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	pod := testPod(v1.RestartPolicyNever, []string{"side"}, "a")
	pod.Spec.InitContainers[0].RestartPolicy = &always
	gen := Generator{}
	// Sidecar not yet started: Pending, not initialized.
	s := gen.Generate(pod, &container.PodStatus{Sandboxes: readySandbox()}, nil, nil, t0)
	if s.Phase != v1.PodPending || cond(s, v1.PodInitialized).Status != v1.ConditionFalse {
		t.Fatalf("phase %s initialized %+v", s.Phase, cond(s, v1.PodInitialized))
	}
	// Sidecar running and app running: Running, initialized; both count
	// for readiness.
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{running("side", t0), running("a", t0)}}
	s = gen.Generate(pod, rs, nil, nil, t0)
	if s.Phase != v1.PodRunning || cond(s, v1.PodInitialized).Status != v1.ConditionTrue || cond(s, v1.PodReady).Status != v1.ConditionTrue {
		t.Fatalf("phase %s conditions %+v", s.Phase, s.Conditions)
	}
	// The app finished under Never: Succeeded, whatever the sidecar does
	// (sidecars do not hold the phase; the runtime manager stops them).
	rs.Containers = []*container.ContainerStatus{running("side", t0), exited("a", t0, 0, 0)}
	if s = gen.Generate(pod, rs, nil, nil, t0); s.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s, want Succeeded once app containers are done", s.Phase)
	}
}

func TestInitContainerReadyWithoutProber(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, []string{"i"}, "a")
	rs := &container.PodStatus{Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{exited("i", t0, 0, 0), running("a", t0)}}
	s := Generator{}.Generate(pod, rs, nil, nil, t0)
	if !s.InitContainerStatuses[0].Ready {
		t.Fatalf("a completed init container is ready: %+v", s.InitContainerStatuses[0])
	}
	rs.Containers[0] = exited("i", t0, 1, 0)
	rs.Containers = rs.Containers[:1]
	if s = (Generator{}).Generate(pod, rs, nil, nil, t0); s.InitContainerStatuses[0].Ready {
		t.Fatalf("a failed init container is not ready")
	}
}

// withRestartRule gives the pod's first container restartPolicy Never and
// a rule restarting it on exit code code.
func withRestartRule(pod *v1.Pod, code int32) *v1.Pod {
	never := v1.ContainerRestartPolicyNever
	pod.Spec.Containers[0].RestartPolicy = &never
	pod.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{code}}}}
	return pod
}

// withOwnPolicy gives the pod's first container its own restart policy.
func withOwnPolicy(pod *v1.Pod, policy v1.ContainerRestartPolicy) *v1.Pod {
	pod.Spec.Containers[0].RestartPolicy = &policy
	return pod
}

// Readiness gates: Ready follows the gate conditions someone else sets on
// the pod's status (through the API server), as well as the containers.
func TestReadinessGatesFromThePodsStatus(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/one"}, {ConditionType: "example.com/two"}}
	rs := &container.PodStatus{UID: "u1", Sandboxes: readySandbox(), Containers: []*container.ContainerStatus{running("a", t0)}}
	ready := func() v1.PodCondition {
		s := Generator{}.Generate(pod, rs, nil, nil, t0)
		for _, c := range s.Conditions {
			if c.Type == v1.PodReady {
				return c
			}
		}
		t.Fatal("no Ready condition")
		return v1.PodCondition{}
	}
	if c := ready(); c.Status != v1.ConditionFalse || c.Reason != ReasonReadinessGatesNotReady {
		t.Fatalf("no gate conditions: Ready %s (%s), want False (%s)", c.Status, c.Reason, ReasonReadinessGatesNotReady)
	}
	pod.Status.Conditions = []v1.PodCondition{{Type: "example.com/one", Status: v1.ConditionTrue}, {Type: "example.com/two", Status: v1.ConditionFalse}}
	if c := ready(); c.Status != v1.ConditionFalse || !strings.Contains(c.Message, `"example.com/two" is not "True"`) {
		t.Fatalf("one gate false: Ready %s (%s)", c.Status, c.Message)
	}
	pod.Status.Conditions[1].Status = v1.ConditionTrue
	if c := ready(); c.Status != v1.ConditionTrue {
		t.Fatalf("both gates true: Ready %s (%s), want True", c.Status, c.Message)
	}
}
