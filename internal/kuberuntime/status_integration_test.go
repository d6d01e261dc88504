package kuberuntime

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/status"
)

// TestStatusAfterCrashLoop checks what a user sees in `get pods` after a
// container crashes twice: the sync result feeds status generation.
func TestStatusAfterCrashLoop(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	gen := status.Generator{HostIP: e.cfg.HostIP}
	e.sync(pod)
	e.exit(pod, "a", 3)
	e.sync(pod)
	e.exit(pod, "a", 3)
	res := e.sync(pod)
	s := gen.Generate(pod, e.status(pod).ps, nil, res.Waiting, e.clock.Now())

	cs := s.ContainerStatuses[0]
	if s.Phase != v1.PodRunning || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
		t.Fatalf("phase %s state %+v, want Running with CrashLoopBackOff", s.Phase, cs.State)
	}
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
		t.Fatalf("restartCount %d lastState %+v", cs.RestartCount, cs.LastTerminationState)
	}
	if s.PodIP == "" || s.HostIP != "192.0.2.10" {
		t.Fatalf("podIP %q hostIP %q", s.PodIP, s.HostIP)
	}
	for _, c := range s.Conditions {
		if c.Type == v1.PodReady && (c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [a]") {
			t.Fatalf("Ready = %+v", c)
		}
	}
}

// TestStatusOfCompletedNeverPod: a Never pod whose only container
// succeeded is Succeeded, its sandbox stopped.
func TestStatusOfCompletedNeverPod(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyNever, nil, "a")
	e.sync(pod)
	e.exit(pod, "a", 0)
	res := e.sync(pod)
	s := status.Generator{}.Generate(pod, e.status(pod).ps, nil, res.Waiting, e.clock.Now())
	if s.Phase != v1.PodSucceeded || s.ContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Fatalf("phase %s, state %+v", s.Phase, s.ContainerStatuses[0].State)
	}
}
