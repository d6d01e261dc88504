package status

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// containerStatuses builds one status per spec container, in spec order.
func (g Generator) containerStatuses(specs []v1.Container, rs *container.PodStatus, prev []v1.ContainerStatus,
	waiting map[string]container.Waiting, isInit, hasInit bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		spec := &specs[i]
		cs := g.containerStatus(spec, attemptsOf(rs, spec.Name), findStatus(prev, spec.Name), hasInit)
		if w, ok := waiting[spec.Name]; ok && cs.State.Running == nil {
			initDone := isInit && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
			if !initDone {
				if cs.State.Terminated != nil {
					cs.LastTerminationState = cs.State
				}
				cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}}
			}
		}
		if isInit && g.Probes == nil {
			// Without a prober: a finished init container is ready, a
			// sidecar is ready while it runs.
			if podspec.IsSidecar(spec) {
				cs.Ready = cs.State.Running != nil
			} else {
				cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
			}
		}
		out = append(out, cs)
	}
	return out
}

func (g Generator) containerStatus(spec *v1.Container, attempts []*container.ContainerStatus, prev *v1.ContainerStatus, hasInit bool) v1.ContainerStatus {
	notStarted := false
	if len(attempts) == 0 {
		// The runtime no longer has it (removed by GC): a finished
		// container keeps the status it had.
		if prev != nil && (prev.State.Terminated != nil || prev.LastTerminationState.Terminated != nil) {
			return *prev.DeepCopy()
		}
		reason := ReasonContainerCreating
		if hasInit {
			reason = ReasonPodInitializing
		}
		return v1.ContainerStatus{
			Name:    spec.Name,
			Image:   spec.Image,
			State:   v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}},
			Ready:   false,
			Started: &notStarted,
		}
	}
	cur := attempts[0]
	cs := v1.ContainerStatus{
		Name:         spec.Name,
		Image:        spec.Image,
		ImageID:      cur.ImageRef,
		ContainerID:  cur.ID.String(),
		RestartCount: int32(cur.RestartCount),
		State:        g.state(cur),
	}
	if len(attempts) > 1 && attempts[1].State == container.StateExited {
		cs.LastTerminationState = g.state(attempts[1])
	} else if prev != nil && prev.RestartCount == cs.RestartCount && prev.LastTerminationState.Terminated != nil {
		cs.LastTerminationState = *prev.LastTerminationState.DeepCopy()
	}
	running := cs.State.Running != nil
	if g.Probes == nil {
		cs.Ready = running
	}
	started := running && g.Probes == nil
	cs.Started = &started
	return cs
}

func (g Generator) state(c *container.ContainerStatus) v1.ContainerState {
	switch c.State {
	case container.StateRunning:
		return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}}
	case container.StateExited:
		reason := c.Reason
		if reason == "" {
			reason = "Error"
			if c.ExitCode == 0 {
				reason = "Completed"
			}
		}
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode:    c.ExitCode,
			Reason:      reason,
			Message:     c.Message,
			StartedAt:   metav1.NewTime(c.StartedAt),
			FinishedAt:  metav1.NewTime(c.FinishedAt),
			ContainerID: c.ID.String(),
		}}
	default:
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonContainerCreating}}
	}
}

// attemptsOf returns the runtime's attempts of the named container,
// newest first.
func attemptsOf(rs *container.PodStatus, name string) []*container.ContainerStatus {
	if rs == nil {
		return nil
	}
	var out []*container.ContainerStatus
	for _, c := range rs.Containers {
		if c.Name == name {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].RestartCount > out[j].RestartCount
	})
	return out
}

func findStatus(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}
