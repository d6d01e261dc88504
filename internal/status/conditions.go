package status

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// Condition reasons, in the kubelet's words.
const (
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonPodCompleted             = "PodCompleted"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
)

// conditions builds the pod conditions in the order the kubelet reports
// them, keeping each one's lastTransitionTime while its status holds.
func conditions(pod *v1.Pod, rs *container.PodStatus, s *v1.PodStatus, prev []v1.PodCondition, now time.Time) []v1.PodCondition {
	sandboxReady := v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse}
	if newestSandboxReady(rs) {
		sandboxReady.Status = v1.ConditionTrue
	}
	containersReady := containersReadyCondition(pod, s)
	ready := containersReady
	ready.Type = v1.PodReady
	if ready.Status == v1.ConditionTrue {
		ready = readinessGates(pod, prev)
	}
	out := []v1.PodCondition{
		sandboxReady,
		initializedCondition(pod, s),
		ready,
		containersReady,
		{Type: v1.PodScheduled, Status: v1.ConditionTrue},
	}
	for i := range out {
		out[i].LastTransitionTime = metav1.NewTime(now)
		for _, p := range prev {
			if p.Type == out[i].Type && p.Status == out[i].Status {
				out[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return out
}

func newestSandboxReady(rs *container.PodStatus) bool {
	if rs == nil {
		return false
	}
	var newest *container.SandboxStatus
	for _, sb := range rs.Sandboxes {
		if newest == nil || sb.CreatedAt.After(newest.CreatedAt) {
			newest = sb
		}
	}
	return newest != nil && newest.State == runtimeapi.PodSandboxState_SANDBOX_READY
}

func initializedCondition(pod *v1.Pod, s *v1.PodStatus) v1.PodCondition {
	cond := v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue}
	// Once an app container ran, the pod stays initialized.
	for _, cs := range s.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			return cond
		}
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := findStatus(s.InitContainerStatuses, c.Name)
		switch {
		case cs == nil:
			unknown = append(unknown, c.Name)
		case podspec.IsSidecar(c):
			if cs.State.Running == nil || cs.Started == nil || !*cs.Started {
				incomplete = append(incomplete, c.Name)
			}
		case cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, c.Name)
		}
	}
	if len(unknown) == 0 && len(incomplete) == 0 {
		return cond
	}
	cond.Status = v1.ConditionFalse
	cond.Reason = ReasonContainersNotInitialized
	cond.Message = notReadyMessage("incomplete", unknown, incomplete)
	return cond
}

func containersReadyCondition(pod *v1.Pod, s *v1.PodStatus) v1.PodCondition {
	cond := v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue}
	var unknown, unready []string
	check := func(name string, statuses []v1.ContainerStatus) {
		cs := findStatus(statuses, name)
		switch {
		case cs == nil:
			unknown = append(unknown, name)
		case !cs.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name, s.InitContainerStatuses)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name, s.ContainerStatuses)
	}
	if s.Phase == v1.PodSucceeded && len(unknown) == 0 {
		cond.Status, cond.Reason = v1.ConditionFalse, ReasonPodCompleted
		return cond
	}
	if len(unknown) == 0 && len(unready) == 0 {
		return cond
	}
	cond.Status = v1.ConditionFalse
	cond.Reason = ReasonContainersNotReady
	cond.Message = notReadyMessage("unready", unknown, unready)
	return cond
}

// notReadyMessage says which containers hold the condition back, like
// "containers with unknown status: [a], containers with unready status: [b]".
func notReadyMessage(kind string, unknown, other []string) string {
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unknown status: [%s]", strings.Join(unknown, " ")))
	}
	if len(other) > 0 {
		parts = append(parts, fmt.Sprintf("containers with %s status: [%s]", kind, strings.Join(other, " ")))
	}
	return strings.Join(parts, ", ")
}

// readinessGates makes Ready wait for every readiness gate's condition to
// be True. Someone else sets those conditions (a controller, through the
// API server: they arrive on the pod's own status, which wins over what
// this agent last wrote); nothing sets them in standalone mode, so a gated
// pod stays unready, as the kubelet would leave it.
func readinessGates(pod *v1.Pod, prev []v1.PodCondition) v1.PodCondition {
	cond := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
	var msgs []string
	for _, gate := range pod.Spec.ReadinessGates {
		c := findCondition(pod.Status.Conditions, gate.ConditionType)
		if c == nil {
			c = findCondition(prev, gate.ConditionType)
		}
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gate.ConditionType))
		case c.Status != v1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", gate.ConditionType, c.Status))
		}
	}
	if len(msgs) > 0 {
		cond.Status, cond.Reason, cond.Message = v1.ConditionFalse, ReasonReadinessGatesNotReady, strings.Join(msgs, ", ")
	}
	return cond
}

func findCondition(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// TerminatedByKubelet is the final status of a pod the node itself ends
// (eviction, node shutdown): Failed with reason and message, and the
// DisruptionTarget condition saying the kubelet did it.
func TerminatedByKubelet(reason, message string) v1.PodStatus {
	return v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  reason,
		Message: message,
		Conditions: []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: message,
		}},
	}
}
