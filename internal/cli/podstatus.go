package cli

import (
	"fmt"
	"time"

	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// age formats the time since t as kubectl does ("5m", "3h2m", "<unknown>").
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	d := now.Sub(t)
	if d < 0 {
		// Clock skew between agent and CLI: show as just now.
		d = 0
	}
	return duration.HumanDuration(d)
}

// podRow is the computed summary kubectl shows for a pod.
type podRow struct {
	Ready    string // "1/2"
	Status   string // "Running", "Init:0/1", "CrashLoopBackOff", ...
	Restarts string // "3 (12s ago)"
}

// summarizePod computes READY, STATUS and RESTARTS with the rules kubectl
// uses: the first init container that has not succeeded decides the status
// while initializing ("Init:1/3", "Init:CrashLoopBackOff",
// "Init:ExitCode:1"); afterwards the last app container with a waiting or
// terminated reason decides it; a pod being deleted that has not finished
// shows "Terminating".
func summarizePod(pod *v1.Pod, now time.Time) podRow {
	status := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		status = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonSchedulingGated {
			status = v1.PodReasonSchedulingGated
		}
	}

	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&c) {
			sidecars[c.Name] = true
		}
	}
	total := len(pod.Spec.Containers) + len(sidecars)
	ready := 0
	restarts, sidecarRestarts := 0, 0
	var lastRestart, lastSidecarRestart time.Time
	later := func(t *time.Time, s v1.ContainerStatus) {
		if term := s.LastTerminationState.Terminated; term != nil && term.FinishedAt.After(*t) {
			*t = term.FinishedAt.Time
		}
	}

	initializing := false
	for i, s := range pod.Status.InitContainerStatuses {
		restarts += int(s.RestartCount)
		later(&lastRestart, s)
		if sidecars[s.Name] {
			sidecarRestarts += int(s.RestartCount)
			later(&lastSidecarRestart, s)
			if s.Started != nil && *s.Started && s.Ready {
				ready++
			}
		}
		switch {
		case s.State.Terminated != nil && s.State.Terminated.ExitCode == 0:
			continue
		case sidecars[s.Name] && s.Started != nil && *s.Started:
			continue
		case s.State.Terminated != nil:
			t := s.State.Terminated
			switch {
			case t.Reason != "":
				status = "Init:" + t.Reason
			case t.Signal != 0:
				status = fmt.Sprintf("Init:Signal:%d", t.Signal)
			default:
				status = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
			}
		case s.State.Waiting != nil && s.State.Waiting.Reason != "" && s.State.Waiting.Reason != "PodInitializing":
			status = "Init:" + s.State.Waiting.Reason
		default:
			status = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || podConditionTrue(pod, v1.PodInitialized) {
		restarts = sidecarRestarts
		lastRestart = lastSidecarRestart
		running := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			s := pod.Status.ContainerStatuses[i]
			restarts += int(s.RestartCount)
			later(&lastRestart, s)
			switch {
			case s.State.Waiting != nil && s.State.Waiting.Reason != "":
				status = s.State.Waiting.Reason
			case s.State.Terminated != nil && s.State.Terminated.Reason != "":
				status = s.State.Terminated.Reason
			case s.State.Terminated != nil && s.State.Terminated.Signal != 0:
				status = fmt.Sprintf("Signal:%d", s.State.Terminated.Signal)
			case s.State.Terminated != nil:
				status = fmt.Sprintf("ExitCode:%d", s.State.Terminated.ExitCode)
			case s.Ready && s.State.Running != nil:
				running = true
				ready++
			}
		}
		// A pod whose last container completed while others still run is
		// running, not completed.
		if status == "Completed" && running {
			if podConditionTrue(pod, v1.PodReady) {
				status = string(v1.PodRunning)
			} else {
				status = "NotReady"
			}
		}
	}

	// A deleted pod that already finished keeps its final status, as in
	// kubectl: only a pod still running down is "Terminating".
	if pod.DeletionTimestamp != nil {
		terminal := pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
		switch {
		case pod.Status.Reason == "NodeLost":
			status = string(v1.PodUnknown)
		case !terminal:
			status = "Terminating"
		}
	}

	r := fmt.Sprint(restarts)
	if !lastRestart.IsZero() {
		r = fmt.Sprintf("%d (%s ago)", restarts, age(lastRestart, now))
	}
	return podRow{Ready: fmt.Sprintf("%d/%d", ready, total), Status: status, Restarts: r}
}

func podConditionTrue(pod *v1.Pod, t v1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// qosClass returns the pod's QoS class: the status field when the agent set
// it, else computed from requests and limits.
func qosClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	hasAny, guaranteed := false, true
	containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range containers {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				hasAny = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !hasAny:
		return v1.PodQOSBestEffort
	case guaranteed:
		return v1.PodQOSGuaranteed
	default:
		return v1.PodQOSBurstable
	}
}
