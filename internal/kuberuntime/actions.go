package kuberuntime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
)

// podActions is what one sync must do to a pod; computePodActions decides
// it from the spec and the runtime's view alone.
type podActions struct {
	// KillPod stops every running container and the sandbox.
	KillPod bool
	// CreateSandbox makes a new sandbox (after KillPod when it replaces
	// one: SandboxChanged).
	CreateSandbox  bool
	SandboxChanged bool
	SandboxID      string
	Attempt        uint32
	// InitContainersToStart and ContainersToStart index the pod spec.
	InitContainersToStart []int
	ContainersToStart     []int
	// ContainersToKill are running containers to stop (and maybe restart).
	ContainersToKill []containerToKill
}

type containerToKill struct {
	ID      string
	Name    string
	Spec    *v1.Container
	Message string // the Killing event's message
	Reason  string // liveness, startup or "" (spec changed)
}

func restartPolicy(pod *v1.Pod) v1.RestartPolicy {
	if pod.Spec.RestartPolicy == "" {
		return v1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// newestSandbox returns the newest sandbox and how many are ready.
func newestSandbox(ps *container.PodStatus) (*container.SandboxStatus, int) {
	var newest *container.SandboxStatus
	ready := 0
	for _, sb := range ps.Sandboxes {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
		if newest == nil || sb.CreatedAt.After(newest.CreatedAt) {
			newest = sb
		}
	}
	return newest, ready
}

// shouldRestart says whether a container that is not running should be
// started again under the pod's restart policy.
func shouldRestart(st *container.ContainerStatus, policy v1.RestartPolicy) bool {
	if st == nil || st.State != container.StateExited {
		return true // never ran, or only created: start it
	}
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return st.ExitCode != 0
	default:
		return true
	}
}

// computePodActions decides what SyncPod does. probes may be nil.
func computePodActions(pod *v1.Pod, ps *container.PodStatus, probes ProbeResults) podActions {
	if ps == nil {
		ps = &container.PodStatus{}
	}
	policy := restartPolicy(pod)
	var acts podActions

	newest, ready := newestSandbox(ps)
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
			st := ps.FindContainer(pod.Spec.Containers[i].Name)
			if policy == v1.RestartPolicyOnFailure && st != nil && st.State == container.StateExited && st.ExitCode == 0 {
				continue // succeeded; a new sandbox does not change that
			}
			acts.ContainersToStart = append(acts.ContainersToStart, i)
		}
		if len(acts.ContainersToStart) == 0 {
			acts.CreateSandbox, acts.SandboxChanged = false, false
		}
		return acts
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
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := inSandbox(c.Name)
		if isSidecar(c) {
			if st == nil || st.State != container.StateRunning {
				acts.InitContainersToStart = append(acts.InitContainersToStart, i)
				if !initialized {
					return acts // the next init container waits for this one
				}
				continue
			}
			if k, ok := checkRunning(c, st, v1.RestartPolicyAlways, probes); ok {
				acts.ContainersToKill = append(acts.ContainersToKill, k)
				acts.InitContainersToStart = append(acts.InitContainersToStart, i)
			}
			continue
		}
		if initialized {
			continue
		}
		switch {
		case st == nil || st.State == container.StateCreated || st.State == container.StateUnknown:
			acts.InitContainersToStart = append(acts.InitContainersToStart, i)
			return acts
		case st.State == container.StateRunning:
			return acts // wait for it to finish
		case st.ExitCode == 0:
			continue
		case policy == v1.RestartPolicyNever:
			acts.KillPod = true // the pod failed
			return acts
		default:
			acts.InitContainersToStart = append(acts.InitContainersToStart, i)
			return acts
		}
	}

	keep := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st := ps.FindContainer(c.Name)
		if st == nil || st.State != container.StateRunning {
			if shouldRestart(st, policy) {
				acts.ContainersToStart = append(acts.ContainersToStart, i)
			}
			continue
		}
		k, kill := checkRunning(c, st, policy, probes)
		if !kill {
			keep++
			continue
		}
		acts.ContainersToKill = append(acts.ContainersToKill, k)
		if k.Reason == "" || policy != v1.RestartPolicyNever {
			acts.ContainersToStart = append(acts.ContainersToStart, i)
		}
	}
	if keep == 0 && len(acts.ContainersToStart) == 0 {
		// Nothing runs or will run again: the pod is done, sidecars too.
		acts.KillPod = true
		acts.InitContainersToStart, acts.ContainersToKill = nil, nil
	}
	return acts
}

// checkRunning decides whether a running container must be killed: its
// spec changed, or it failed its liveness or startup probe.
func checkRunning(c *v1.Container, st *container.ContainerStatus, policy v1.RestartPolicy, probes ProbeResults) (containerToKill, bool) {
	k := containerToKill{ID: st.ID, Name: c.Name, Spec: c}
	restart := policy != v1.RestartPolicyNever
	switch {
	case st.Hash != hashContainer(c):
		k.Message = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
		return k, true
	case probes != nil && probes.LivenessFailed(st.ID):
		k.Reason, k.Message = "liveness", fmt.Sprintf("Container %s failed liveness probe", c.Name)
	case probes != nil && probes.StartupFailed(st.ID):
		k.Reason, k.Message = "startup", fmt.Sprintf("Container %s failed startup probe", c.Name)
	default:
		return k, false
	}
	if restart {
		k.Message += ", will be restarted"
	}
	return k, true
}
