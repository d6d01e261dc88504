package embedded

import (
	"context"
	"maps"
	"sort"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// StartContainer creates the container's cgroup, applies its limits and
// launches its monitor, returning once the container process runs (or
// failed to start, which is an error and leaves the container EXITED with
// reason StartError).
func (r *Runtime) StartContainer(ctx context.Context, containerID string) error {
	return criErr(r.ctrs.Start(containerID))
}

// StopContainer sends the container's stop signal (the image's, default
// SIGTERM) to its process group, SIGKILL after timeout seconds, and returns
// once the exit is recorded. Stopping a container that is not running is a
// no-op.
func (r *Runtime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	return criErr(r.ctrs.Stop(ctx, containerID, timeout))
}

// RemoveContainer kills the container if it still runs and deletes it, its
// cgroup and its state (not its log, which the kubelet manages). Removing an
// unknown container is not an error (CRI: the call is idempotent).
func (r *Runtime) RemoveContainer(ctx context.Context, containerID string) error {
	c, err := r.ctrs.Get(containerID)
	if err != nil {
		return nil
	}
	if err := r.ctrs.Remove(ctx, containerID); err != nil {
		return criErr(err)
	}
	if c.Rootfs != nil {
		// Layers of an image removed while this container used them.
		if err := r.images.PruneLayers(r.ctrs.LayersInUse); err != nil {
			r.log.Warn("cannot prune unused image layers", "err", err)
		}
	}
	return nil
}

// UpdateContainerResources records new limits and writes them into the
// container's cgroup if it runs.
func (r *Runtime) UpdateContainerResources(ctx context.Context, containerID string, res *runtimeapi.ContainerResources) error {
	return criErr(r.ctrs.UpdateResources(containerID, fromCRIResources(res.GetLinux())))
}

// ReopenContainerLog makes the monitor reopen the container's log file (after
// the kubelet rotated it) and returns once the new file exists.
func (r *Runtime) ReopenContainerLog(ctx context.Context, containerID string) error {
	return criErr(r.ctrs.ReopenLog(ctx, containerID))
}

// ExecSync runs cmd in the container's environment (its env, working
// directory and cgroups) and returns its output. A non-zero exit is returned
// as a k8s.io/utils/exec.CodeExitError (as the kubelet's CRI client does);
// a timeout as an error wrapping context.DeadlineExceeded; a command that
// cannot be run (missing binary) as an error classified NotFound.
func (r *Runtime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	stdout, stderr, err := r.ctrs.Exec(ctx, containerID, cmd, timeout)
	return stdout, stderr, criErr(err)
}

// ListContainers lists containers matching filter (id, state, sandbox id,
// labels), oldest first.
func (r *Runtime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var out []*runtimeapi.Container
	for _, c := range r.ctrs.List() {
		st := criState(&c)
		if filter != nil {
			if filter.GetId() != "" && !matchID(c.ID, filter.GetId()) {
				continue
			}
			if filter.GetPodSandboxId() != "" && !matchID(c.SandboxID, filter.GetPodSandboxId()) {
				continue
			}
			if filter.GetState() != nil && filter.GetState().GetState() != st {
				continue
			}
			if !matchLabels(c.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		out = append(out, &runtimeapi.Container{
			Id: c.ID, PodSandboxId: c.SandboxID,
			Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
			Image:    &runtimeapi.ImageSpec{Image: c.Image}, ImageRef: c.ImageRef(), ImageId: c.ImageRef(),
			State: st, CreatedAt: c.CreatedAt,
			Labels: maps.Clone(c.Labels), Annotations: maps.Clone(c.Annotations),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out, nil
}

// ContainerStatus reports a container, including its exit code and reason
// ("Completed", "Error", "OOMKilled", "StartError", "ContainerStateLost")
// once it has exited; a running container re-adopted after its state was
// lost also carries ContainerStateLost and a message.
func (r *Runtime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := r.ctrs.Get(containerID)
	if err != nil {
		return nil, criErr(err)
	}
	st := &runtimeapi.ContainerStatus{
		Id:       c.ID,
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
		State:    criState(&c), CreatedAt: c.CreatedAt,
		Image: &runtimeapi.ImageSpec{Image: c.Image}, ImageRef: c.ImageRef(), ImageId: c.ImageRef(),
		Labels: maps.Clone(c.Labels), Annotations: maps.Clone(c.Annotations),
		LogPath: c.LogFile, Resources: toCRIResources(c.Resources),
		Mounts: criMounts(&c.Record),
	}
	if c.Start != nil {
		st.StartedAt = c.Start.StartedAt
	}
	if c.Exit == nil && c.StateLost != "" {
		st.Reason, st.Message = monitorproc.ReasonStateLost, c.StateLost
	}
	if c.Exit != nil {
		st.FinishedAt = c.Exit.FinishedAt
		st.ExitCode = c.Exit.ExitCode
		st.Reason = c.Exit.Reason
		st.Message = c.Exit.Message
		if c.Start == nil || c.Start.Error != "" {
			st.StartedAt = 0
		}
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if verbose && c.Start != nil {
		resp.Info = map[string]string{"pid": strconv.Itoa(c.Start.Pid), "monitorPid": strconv.Itoa(c.Start.MonitorPid), "cgroup": c.CgroupPath}
	}
	return resp, nil
}
