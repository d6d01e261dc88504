package lifecycle

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// restartPolicy is the pod's restart policy, Always when unset.
func restartPolicy(pod *v1.Pod) v1.RestartPolicy {
	if pod.Spec.RestartPolicy == "" {
		return v1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

// shouldStart says whether an app container that is not running should be
// started (again): its restart rules and policy, else the pod's.
func shouldStart(c *v1.Container, st *container.ContainerStatus, policy v1.RestartPolicy) bool {
	if st == nil || st.State != container.StateExited {
		return true // never ran, or only created: start it
	}
	return podspec.RestartsAfterExit(c, policy, int32(st.ExitCode))
}

// computeActions decides what one sync does to a pod, from its spec, the
// runtime's view, the probe results (nil: no probe has failed) and the
// running containers an in-place resize restarts (name → Killing
// message). It is pure; crash-loop back-off is applied afterwards
// (restartGate).
func computeActions(pod *v1.Pod, ps *container.PodStatus, probes ProbeResults, restarts map[string]string) container.PodActions {
	if ps == nil {
		ps = &container.PodStatus{}
	}
	policy := restartPolicy(pod)
	var acts container.PodActions

	newest, ready := ps.NewestSandbox()
	switch {
	case newest == nil:
		acts.CreateSandbox = true
	case newest.State != runtimeapi.PodSandboxState_SANDBOX_READY || ready > 1:
		acts.CreateSandbox, acts.SandboxChanged, acts.KillPod = true, true, true
		acts.Attempt = newest.Attempt + 1
	default:
		acts.SandboxID = newest.ID
	}
	if acts.CreateSandbox {
		return newSandboxActions(pod, ps, policy, acts)
	}

	// Init containers: statuses from older sandboxes do not count.
	inSandbox := func(name string) *container.ContainerStatus {
		st := ps.FindContainer(name)
		if st == nil || st.CreatedAt.Before(newest.CreatedAt) {
			return nil
		}
		return st
	}
	initialized := false
	for i := range pod.Spec.Containers {
		if inSandbox(pod.Spec.Containers[i].Name) != nil {
			initialized = true
		}
	}
	if done := initActions(pod, inSandbox, initialized, policy, probes, restarts, &acts); done {
		return acts
	}

	keep := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st := ps.FindContainer(c.Name)
		if st == nil || st.State != container.StateRunning {
			if shouldStart(c, st, policy) {
				acts.ContainersToStart = append(acts.ContainersToStart, i)
			}
			continue
		}
		own := podspec.RestartPolicyOf(c, policy)
		k, kill := checkRunning(c, st, own, probes, restarts)
		if !kill {
			keep++
			continue
		}
		acts.ContainersToKill = append(acts.ContainersToKill, k)
		if k.Reason == "" || own != v1.RestartPolicyNever {
			acts.ContainersToStart = append(acts.ContainersToStart, i)
		}
	}
	if keep == 0 && len(acts.ContainersToStart) == 0 {
		// Nothing runs or will run again: the pod is done, sidecars too.
		acts.KillPod = true
		acts.InitContainersToStart, acts.ContainersToKill = nil, nil
		return acts
	}
	// Ephemeral containers (kubectl debug) start once in the running pod.
	for i, ec := range pod.Spec.EphemeralContainers {
		if ps.FindContainer(ec.Name) == nil {
			acts.EphemeralContainersToStart = append(acts.EphemeralContainersToStart, i)
		}
	}
	return acts
}

// newSandboxActions is what a sync does when the pod needs a (new)
// sandbox: start the first init container, or every app container that
// should run.
func newSandboxActions(pod *v1.Pod, ps *container.PodStatus, policy v1.RestartPolicy, acts container.PodActions) container.PodActions {
	if policy == v1.RestartPolicyNever && acts.Attempt != 0 && len(ps.Containers) != 0 {
		// The pod ran and must not run again: just make sure it is down.
		acts.CreateSandbox, acts.SandboxChanged = false, false
		return acts
	}
	if len(pod.Spec.InitContainers) > 0 {
		acts.InitContainersToStart = []int{0}
		return acts
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st := ps.FindContainer(c.Name)
		if podspec.RestartPolicyOf(c, policy) == v1.RestartPolicyOnFailure && st != nil && st.State == container.StateExited && st.ExitCode == 0 {
			continue // succeeded; a new sandbox does not change that
		}
		acts.ContainersToStart = append(acts.ContainersToStart, i)
	}
	if len(acts.ContainersToStart) == 0 {
		acts.CreateSandbox, acts.SandboxChanged = false, false
	}
	return acts
}

// initActions adds what the init containers need: the next one to start in
// order, a sidecar to (re)start, or a failed pod. It reports done when the
// app containers must wait (an init container has not finished yet, or
// the pod failed).
func initActions(pod *v1.Pod, inSandbox func(string) *container.ContainerStatus, initialized bool,
	policy v1.RestartPolicy, probes ProbeResults, restarts map[string]string, acts *container.PodActions) (done bool) {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := inSandbox(c.Name)
		if podspec.IsSidecar(c) {
			if st == nil || st.State != container.StateRunning {
				acts.InitContainersToStart = append(acts.InitContainersToStart, i)
				if !initialized {
					return true // the next init container waits for this one
				}
				continue
			}
			if k, kill := checkRunning(c, st, v1.RestartPolicyAlways, probes, restarts); kill {
				acts.ContainersToKill = append(acts.ContainersToKill, k)
				acts.InitContainersToStart = append(acts.InitContainersToStart, i)
				if !initialized {
					return true
				}
				continue
			}
			if !initialized && !sidecarStarted(c, st, probes) {
				return true // what follows waits for its startup probe
			}
			continue
		}
		if initialized {
			continue
		}
		switch {
		case st == nil || st.State == container.StateCreated || st.State == container.StateUnknown:
			acts.InitContainersToStart = append(acts.InitContainersToStart, i)
			return true
		case st.State == container.StateRunning:
			return true // wait for it to finish
		case st.ExitCode == 0:
			continue
		case policy == v1.RestartPolicyNever:
			acts.KillPod = true // the pod failed
			return true
		default:
			acts.InitContainersToStart = append(acts.InitContainersToStart, i)
			return true
		}
	}
	return false
}

// sidecarStarted reports whether a running sidecar counts as started for
// the containers after it: it has no startup probe, or the probe succeeded.
func sidecarStarted(c *v1.Container, st *container.ContainerStatus, probes ProbeResults) bool {
	return c.StartupProbe == nil || probes == nil || probes.StartupSucceeded(st.ID)
}

// checkRunning decides whether a running container must be killed: its
// spec changed, a resize restarts it, or it failed its liveness or
// startup probe.
func checkRunning(c *v1.Container, st *container.ContainerStatus, policy v1.RestartPolicy, probes ProbeResults, restarts map[string]string) (container.ContainerToKill, bool) {
	k := container.ContainerToKill{ID: st.ID, Name: c.Name, Spec: c}
	switch {
	case !container.SameSpec(st.Hash, c):
		k.Message = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
		return k, true
	case restarts[c.Name] != "":
		k.Message = restarts[c.Name]
		return k, true
	case probes != nil && probes.LivenessFailed(st.ID):
		k.Reason, k.Message = "liveness", fmt.Sprintf("Container %s failed liveness probe", c.Name)
	case probes != nil && probes.StartupFailed(st.ID):
		k.Reason, k.Message = "startup", fmt.Sprintf("Container %s failed startup probe", c.Name)
	default:
		return k, false
	}
	if policy != v1.RestartPolicyNever {
		k.Message += ", will be restarted"
	}
	return k, true
}
