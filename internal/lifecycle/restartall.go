package lifecycle

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/status"
)

// A container whose exit matches a restartPolicyRule with the action
// RestartAllContainers restarts its whole pod in place, as the kubelet
// does (RestartAllContainersOnContainerExits): every running container is
// stopped and the pod starts over from its first init container, in the
// same sandbox with the same volumes. From then on the containers' earlier
// attempts count for nothing the pod decides (what must start, in what
// order, with what back-off): they remain only as each container's last
// termination state and in its restart count.

// restartAllSince is when pod uid last restarted all its containers (zero:
// never).
func (p *Planner) restartAllSince(uid types.UID) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restartAll[uid]
}

func (p *Planner) setRestartAll(uid types.UID, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restartAll == nil {
		p.restartAll = map[types.UID]time.Time{}
	}
	p.restartAll[uid] = at
}

// Forget drops what the planner keeps of a pod that is gone.
func (p *Planner) Forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.restartAll, uid)
}

// sinceRestartAll is ps without the container attempts created before the
// pod last restarted all its containers.
func (p *Planner) sinceRestartAll(uid types.UID, ps *container.PodStatus) *container.PodStatus {
	since := p.restartAllSince(uid)
	if ps == nil || since.IsZero() {
		return ps
	}
	view := *ps
	view.Containers = nil
	for _, c := range ps.Containers {
		if !c.CreatedAt.Before(since) {
			view.Containers = append(view.Containers, c)
		}
	}
	return &view
}

// restartAllTrigger is the container whose newest attempt in view exited
// with a code that restarts all the pod's containers, "" when none did.
func restartAllTrigger(pod *v1.Pod, view *container.PodStatus) string {
	for _, c := range allContainers(pod) {
		st := view.FindContainer(c.Name)
		if st != nil && st.State == container.StateExited && podspec.RestartsAllAfterExit(c, st.ExitCode) {
			return c.Name
		}
	}
	return ""
}

// killEverything stops every running container of ps for a restart of
// all of them that trigger's exit asked for.
func killEverything(pod *v1.Pod, ps *container.PodStatus, trigger string) []container.ContainerToKill {
	var kills []container.ContainerToKill
	seen := map[string]bool{}
	for _, st := range ps.Containers {
		if st.State != container.StateRunning || seen[st.ID.ID] {
			continue
		}
		seen[st.ID.ID] = true
		spec := findContainer(pod.Spec.InitContainers, st.Name)
		if spec == nil {
			spec = findContainer(pod.Spec.Containers, st.Name)
		}
		if spec == nil {
			continue
		}
		kills = append(kills, container.ContainerToKill{ID: st.ID, Name: st.Name, Spec: spec,
			Message: fmt.Sprintf("Container %s will be restarted: container %s exited and restarts all containers of the pod", st.Name, trigger)})
	}
	return kills
}

// restartAllWaiting says, while pod restarts all its containers, which of
// them the restart has not reached yet (their newest attempt predates it
// and is not running): they wait (PodInitializing) for their turn, so
// that the pod does not look finished in between.
func (p *Planner) restartAllWaiting(pod *v1.Pod, rs *container.PodStatus) map[string]container.Waiting {
	since := p.restartAllSince(pod.UID)
	if since.IsZero() || rs == nil {
		return nil
	}
	var out map[string]container.Waiting
	for _, c := range allContainers(pod) {
		st := rs.FindContainer(c.Name)
		if st == nil || !st.CreatedAt.Before(since) || st.State == container.StateRunning {
			continue
		}
		if out == nil {
			out = map[string]container.Waiting{}
		}
		out[c.Name] = container.Waiting{Reason: status.ReasonPodInitializing}
	}
	return out
}
