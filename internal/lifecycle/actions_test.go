package lifecycle

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

var base = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// mkPod is a pod named web with the init containers and apps.
func mkPod(policy v1.RestartPolicy, inits []v1.Container, apps ...string) *v1.Pod {
	return withInit(filePod("uid-1", "web", policy, apps...), inits...)
}

// initC is an init container, a sidecar when asked.
func initC(name string, isSidecar bool) v1.Container {
	if isSidecar {
		return sidecar(name)
	}
	return v1.Container{Name: name, Image: "host"}
}

// st makes a runtime status for a spec container; at is minutes after base.
func st(pod *v1.Pod, name string, state container.State, exit int32, at int) *container.ContainerStatus {
	c := specOf(pod, name)
	return &container.ContainerStatus{ID: container.ID{Type: "test", ID: name + "-" + string(rune('a'+at))}, Name: name, State: state, ExitCode: exit,
		CreatedAt: base.Add(time.Duration(at) * time.Minute), Hash: container.Hash(c)}
}

func sandbox(state runtimeapi.PodSandboxState, attempt uint32) *container.SandboxStatus {
	return &container.SandboxStatus{ID: "sb", State: state, CreatedAt: base, Attempt: attempt}
}

type probeStub struct{ liveness, startup map[string]bool }

func (p probeStub) LivenessFailed(id container.ID) bool { return p.liveness[id.ID] }
func (p probeStub) StartupFailed(id container.ID) bool  { return p.startup[id.ID] }
func (p probeStub) StartupSucceeded(container.ID) bool  { return true }

func TestComputeActions(t *testing.T) {
	ready := sandbox(runtimeapi.PodSandboxState_SANDBOX_READY, 0)
	notReady := sandbox(runtimeapi.PodSandboxState_SANDBOX_NOTREADY, 0)
	always, onFailure, never := v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever
	apps := mkPod(always, nil, "a", "b")
	withInit := mkPod(always, []v1.Container{initC("i1", false), initC("i2", false)}, "a")
	withInitNever := mkPod(never, []v1.Container{initC("i1", false)}, "a")
	withSidecar := mkPod(always, []v1.Container{initC("side", true), initC("i1", false)}, "a")
	// Container restart rules (ContainerRestartRules): a restarts on exit
	// code 42 only; b follows the pod (never).
	containerNever, containerAlways := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	withRules := mkPod(never, nil, "a", "b")
	withRules.Spec.Containers[0].RestartPolicy = &containerNever
	withRules.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	ownAlways := mkPod(never, nil, "a")
	ownAlways.Spec.Containers[0].RestartPolicy = &containerAlways
	changed := mkPod(always, nil, "a")
	changedStatus := st(changed, "a", container.StateRunning, 0, 1)
	changedStatus.Hash++

	cases := []struct {
		name   string
		pod    *v1.Pod
		sbs    []*container.SandboxStatus
		cs     []*container.ContainerStatus
		probes ProbeResults
		want   container.PodActions
	}{
		{name: "new pod", pod: apps, want: container.PodActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}},
		{name: "new pod with init starts the first init only", pod: withInit,
			want: container.PodActions{CreateSandbox: true, InitContainersToStart: []int{0}}},
		{name: "all running: nothing to do", pod: apps, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(apps, "a", container.StateRunning, 0, 1), st(apps, "b", container.StateRunning, 0, 1)},
			want: container.PodActions{SandboxID: "sb"}},
		{name: "always restarts a succeeded container", pod: apps, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(apps, "a", container.StateExited, 0, 1), st(apps, "b", container.StateRunning, 0, 1)},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}}},
		{name: "onFailure restarts only failures", pod: mkPod(onFailure, nil, "a", "b"), sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(apps, "a", container.StateExited, 0, 1), st(apps, "b", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{1}}},
		{name: "a restart rule matching the exit code restarts under pod policy never", pod: withRules, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withRules, "a", container.StateExited, 42, 1), st(withRules, "b", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}}},
		{name: "no rule matching: the container's own policy, then the pod's", pod: withRules, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withRules, "a", container.StateExited, 1, 1), st(withRules, "b", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", KillPod: true}},
		{name: "a container's restartPolicy Always beats the pod's never", pod: ownAlways, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(ownAlways, "a", container.StateExited, 0, 1)},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}}},
		{name: "never: all done kills the pod", pod: mkPod(never, nil, "a", "b"), sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(apps, "a", container.StateExited, 0, 1), st(apps, "b", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", KillPod: true}},
		{name: "never: dead sandbox is not recreated", pod: mkPod(never, nil, "a"), sbs: []*container.SandboxStatus{sandbox(runtimeapi.PodSandboxState_SANDBOX_NOTREADY, 0)},
			cs: []*container.ContainerStatus{st(apps, "a", container.StateExited, 0, 1)}, want: container.PodActions{KillPod: true, Attempt: 1}},
		{name: "sandbox died: kill and recreate with next attempt", pod: apps, sbs: []*container.SandboxStatus{notReady},
			cs:   []*container.ContainerStatus{st(apps, "a", container.StateRunning, 0, 1)},
			want: container.PodActions{KillPod: true, CreateSandbox: true, SandboxChanged: true, Attempt: 1, ContainersToStart: []int{0, 1}}},
		{name: "spec changed restarts", pod: changed, sbs: []*container.SandboxStatus{ready}, cs: []*container.ContainerStatus{changedStatus},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}, ContainersToKill: []container.ContainerToKill{
				{ID: changedStatus.ID, Name: "a", Spec: &changed.Spec.Containers[0], Message: "Container a definition changed, will be restarted"}}}},
		{name: "liveness failure restarts", pod: apps, sbs: []*container.SandboxStatus{ready},
			cs:     []*container.ContainerStatus{st(apps, "a", container.StateRunning, 0, 1), st(apps, "b", container.StateRunning, 0, 1)},
			probes: probeStub{liveness: map[string]bool{"a-b": true}},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}, ContainersToKill: []container.ContainerToKill{
				{ID: container.ID{Type: "test", ID: "a-b"}, Name: "a", Spec: &apps.Spec.Containers[0], Reason: "liveness", Message: "Container a failed liveness probe, will be restarted"}}}},
		{name: "startup failure with never kills without restart", pod: mkPod(never, nil, "a"), sbs: []*container.SandboxStatus{ready},
			cs:     []*container.ContainerStatus{st(apps, "a", container.StateRunning, 0, 1)},
			probes: probeStub{startup: map[string]bool{"a-b": true}},
			want:   container.PodActions{SandboxID: "sb", KillPod: true}},
		{name: "init: first running, wait", pod: withInit, sbs: []*container.SandboxStatus{ready},
			cs: []*container.ContainerStatus{st(withInit, "i1", container.StateRunning, 0, 1)}, want: container.PodActions{SandboxID: "sb"}},
		{name: "init: first done, start second", pod: withInit, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withInit, "i1", container.StateExited, 0, 1)},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{1}}},
		{name: "init: all done, start apps", pod: withInit, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withInit, "i1", container.StateExited, 0, 1), st(withInit, "i2", container.StateExited, 0, 2)},
			want: container.PodActions{SandboxID: "sb", ContainersToStart: []int{0}}},
		{name: "init: failure retried under always", pod: withInit, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withInit, "i1", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{0}}},
		{name: "init: failure under never fails the pod", pod: withInitNever, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withInitNever, "i1", container.StateExited, 1, 1)},
			want: container.PodActions{SandboxID: "sb", KillPod: true}},
		{name: "init: statuses from an older sandbox do not count", pod: withInit, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withInit, "i1", container.StateExited, 0, -5), st(withInit, "a", container.StateExited, 0, -4)},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{0}}},
		{name: "sidecar: start it first and wait", pod: withSidecar, sbs: []*container.SandboxStatus{ready},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{0}}},
		{name: "sidecar running: next init proceeds", pod: withSidecar, sbs: []*container.SandboxStatus{ready},
			cs:   []*container.ContainerStatus{st(withSidecar, "side", container.StateRunning, 0, 1)},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{1}}},
		{name: "sidecar died after init: restart it", pod: withSidecar, sbs: []*container.SandboxStatus{ready},
			cs: []*container.ContainerStatus{st(withSidecar, "side", container.StateExited, 1, 1), st(withSidecar, "i1", container.StateExited, 0, 2),
				st(withSidecar, "a", container.StateRunning, 0, 3)},
			want: container.PodActions{SandboxID: "sb", InitContainersToStart: []int{0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := computeActions(tc.pod, &container.PodStatus{Sandboxes: tc.sbs, Containers: tc.cs}, tc.probes, nil)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func BenchmarkComputeActions(b *testing.B) {
	pod := mkPod(v1.RestartPolicyAlways, []v1.Container{initC("side", true), initC("i1", false)}, "a", "b", "c")
	ps := &container.PodStatus{Sandboxes: []*container.SandboxStatus{sandbox(runtimeapi.PodSandboxState_SANDBOX_READY, 0)},
		Containers: []*container.ContainerStatus{st(pod, "side", container.StateRunning, 0, 1), st(pod, "i1", container.StateExited, 0, 2),
			st(pod, "a", container.StateRunning, 0, 3), st(pod, "b", container.StateExited, 1, 3), st(pod, "c", container.StateRunning, 0, 3)}}
	b.ReportAllocs()
	for b.Loop() {
		_ = computeActions(pod, ps, probeStub{}, nil)
	}
}

// specOf finds a container of the pod's spec, init containers included.
func specOf(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// An ephemeral container starts once in the running pod and never again;
// a pod being replaced does not start it.
func TestEphemeralContainersStartOnce(t *testing.T) {
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", Image: "host"}}}
	ready := []*container.SandboxStatus{sandbox(runtimeapi.PodSandboxState_SANDBOX_READY, 0)}
	running := st(pod, "a", container.StateRunning, 0, 1)

	got := computeActions(pod, &container.PodStatus{Sandboxes: ready, Containers: []*container.ContainerStatus{running}}, nil, nil)
	if !reflect.DeepEqual(got.EphemeralContainersToStart, []int{0}) {
		t.Fatalf("ephemeral containers to start %v, want [0]", got.EphemeralContainersToStart)
	}
	exited := &container.ContainerStatus{ID: container.ID{Type: "test", ID: "dbg-1"}, Name: "dbg", State: container.StateExited, ExitCode: 1, CreatedAt: base.Add(2 * time.Minute)}
	got = computeActions(pod, &container.PodStatus{Sandboxes: ready, Containers: []*container.ContainerStatus{exited, running}}, nil, nil)
	if len(got.EphemeralContainersToStart) != 0 {
		t.Errorf("an ephemeral container that ran is started again: %v", got.EphemeralContainersToStart)
	}
	dead := []*container.SandboxStatus{sandbox(runtimeapi.PodSandboxState_SANDBOX_NOTREADY, 0)}
	got = computeActions(pod, &container.PodStatus{Sandboxes: dead, Containers: []*container.ContainerStatus{running}}, nil, nil)
	if len(got.EphemeralContainersToStart) != 0 {
		t.Errorf("a pod getting a new sandbox starts its ephemeral container: %+v", got)
	}
}
