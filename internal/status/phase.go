package status

import (
	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
)

// Phase computes the pod phase from its container statuses by the
// kubelet's rules:
//
//   - Failed: an init container failed and the pod never restarts (an
//     exit that restarts all the pod's containers is no failure);
//   - Pending: an init container is still to run (or a sidecar to start
//     before any app container ran), or an app container waits for its
//     first start, or the runtime knows nothing of a container yet;
//   - Running: an app container runs, or all stopped and one of them will
//     be restarted (by its own restart policy or rules, else the pod's);
//   - Succeeded: all app containers stopped with exit code 0 and none will
//     restart;
//   - Failed: all stopped, one failed, and none will restart.
//
// Whether a stopped container restarts is its own decision
// (ContainerRestartRules, on in the kubelet since 1.34): a pod with
// restartPolicy Always whose only container has restartPolicy Never ends
// Failed or Succeeded when it exits, as the kubelet's does.
func Phase(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus) v1.PodPhase {
	policy := pod.Spec.RestartPolicy
	if policy == "" {
		policy = v1.RestartPolicyAlways
	}
	// failedInit: init containers that failed and will not run again.
	pendingInit, failedInit, pendingSidecars := 0, 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := findStatus(initStatuses, c.Name)
		if podspec.IsSidecar(c) {
			if cs == nil || cs.State.Running == nil || cs.Started == nil || !*cs.Started {
				if cs == nil || cs.LastTerminationState.Terminated == nil && cs.State.Terminated == nil {
					pendingSidecars++
				}
			}
			continue
		}
		switch {
		case cs == nil:
			pendingInit++
		case cs.State.Running != nil:
			pendingInit++
		case cs.State.Terminated != nil:
			if code := cs.State.Terminated.ExitCode; code != 0 && !podspec.RestartsAfterExit(c, policy, code) {
				failedInit++
			}
		case waitingForInit(cs):
			pendingInit++
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			if code := cs.LastTerminationState.Terminated.ExitCode; code != 0 && !podspec.RestartsAfterExit(c, policy, code) {
				failedInit++
			}
		default:
			pendingInit++
		}
	}

	// restarting: stopped containers that will start again (by their own
	// restart policy or rules, which may differ from the pod's).
	unknown, running, waiting, stopped, succeeded, restarting := 0, 0, 0, 0, 0, 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := findStatus(statuses, c.Name)
		switch {
		case cs == nil:
			unknown++
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
			if podspec.RestartsAfterExit(c, policy, cs.State.Terminated.ExitCode) {
				restarting++
			}
		case waitingForInit(cs):
			waiting++ // it ran before: a restart of the pod's containers
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			stopped++
			if podspec.RestartsAfterExit(c, policy, cs.LastTerminationState.Terminated.ExitCode) {
				restarting++
			}
		case cs.State.Waiting != nil:
			waiting++
		default:
			unknown++
		}
	}

	if failedInit > 0 {
		return v1.PodFailed
	}
	appStarted := running+stopped > 0
	switch {
	case pendingInit > 0:
		return v1.PodPending
	case pendingSidecars > 0 && !appStarted:
		return v1.PodPending
	case waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if restarting > 0 {
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	default:
		return v1.PodPending
	}
}

// waitingForInit reports whether a container waits for the pod's init
// containers (PodInitializing) although it ran before: the pod restarts
// all its containers, and this one's turn has not come.
func waitingForInit(cs *v1.ContainerStatus) bool {
	return cs.State.Waiting != nil && cs.State.Waiting.Reason == ReasonPodInitializing
}
