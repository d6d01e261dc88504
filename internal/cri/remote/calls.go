package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
)

// The calls minilet makes, with errors classified. Calls not listed here
// go straight to the cri-client (errors unclassified, gRPC status kept).
// Those that change what runs are detached from their caller's
// cancellation (detach.go).

// Version returns the runtime's name and versions.
func (r *Runtime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	v, err := r.RuntimeService.Version(ctx, apiVersion)
	return v, classify(err)
}

// Status returns the runtime's conditions (RuntimeReady, NetworkReady).
func (r *Runtime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	s, err := r.RuntimeService.Status(ctx, verbose)
	return s, classify(err)
}

// RunPodSandbox runs a sandbox. A sandbox in the host's network namespace
// gets no hostname of its own: the runtime keeps the host's, as the
// kubelet does (containerd refuses to set one in the host's UTS
// namespace).
func (r *Runtime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	if config.GetHostname() != "" && config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		config = proto.Clone(config).(*runtimeapi.PodSandboxConfig)
		config.Hostname = ""
	}
	// As the cri-client bounds it: twice the request timeout.
	id, err := detached(r, ctx, "RunPodSandbox", 2*r.timeout, func(ctx context.Context) (string, error) {
		return r.RuntimeService.RunPodSandbox(ctx, config, runtimeHandler)
	})
	return id, classify(err)
}

// StopPodSandbox stops a sandbox and everything in it.
func (r *Runtime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	return classify(detachedErr(r, ctx, "StopPodSandbox", r.timeout, func(ctx context.Context) error {
		return r.RuntimeService.StopPodSandbox(ctx, podSandboxID)
	}))
}

// RemovePodSandbox removes a sandbox and its containers.
func (r *Runtime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	return classify(detachedErr(r, ctx, "RemovePodSandbox", r.timeout, func(ctx context.Context) error {
		return r.RuntimeService.RemovePodSandbox(ctx, podSandboxID)
	}))
}

// PodSandboxStatus returns a sandbox's status.
func (r *Runtime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	s, err := r.RuntimeService.PodSandboxStatus(ctx, podSandboxID, verbose)
	return s, classify(err)
}

// ListPodSandbox lists sandboxes.
func (r *Runtime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	l, err := r.RuntimeService.ListPodSandbox(ctx, filter)
	return l, classify(err)
}

// CreateContainer creates a container in a sandbox.
func (r *Runtime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := detached(r, ctx, "CreateContainer", r.timeout, func(ctx context.Context) (string, error) {
		return r.RuntimeService.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	})
	return id, classify(err)
}

// StartContainer starts a created container.
func (r *Runtime) StartContainer(ctx context.Context, containerID string) error {
	return classify(detachedErr(r, ctx, "StartContainer", r.timeout, func(ctx context.Context) error {
		return r.RuntimeService.StartContainer(ctx, containerID)
	}))
}

// StopContainer stops a container, SIGKILL after timeout seconds.
func (r *Runtime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	// As the cri-client bounds it: the request timeout plus the grace.
	return classify(detachedErr(r, ctx, "StopContainer", r.timeout+time.Duration(timeout)*time.Second, func(ctx context.Context) error {
		return r.RuntimeService.StopContainer(ctx, containerID, timeout)
	}))
}

// RemoveContainer removes a container.
func (r *Runtime) RemoveContainer(ctx context.Context, containerID string) error {
	return classify(detachedErr(r, ctx, "RemoveContainer", r.timeout, func(ctx context.Context) error {
		return r.RuntimeService.RemoveContainer(ctx, containerID)
	}))
}

// ListContainers lists containers.
func (r *Runtime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	l, err := r.RuntimeService.ListContainers(ctx, filter)
	return l, classify(err)
}

// ContainerStatus returns a container's status. containerd stamps
// startedAt after the start call returns, so a process that dies at once
// can look as if it finished before it started; such a container's
// startedAt is moved back to its finishedAt.
func (r *Runtime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	s, err := r.RuntimeService.ContainerStatus(ctx, containerID, verbose)
	if st := s.GetStatus(); st != nil && st.FinishedAt != 0 && st.FinishedAt < st.StartedAt {
		st.StartedAt = st.FinishedAt
	}
	return s, classify(err)
}

// UpdateContainerResources changes a running container's limits.
func (r *Runtime) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	return classify(r.RuntimeService.UpdateContainerResources(ctx, containerID, resources))
}

// ExecSync runs cmd in a container and waits for it. A non-zero exit is a
// k8s.io/utils/exec.ExitError; a command that outlives timeout is an error
// wrapping context.DeadlineExceeded (as the embedded runtime reports it).
func (r *Runtime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	stdout, stderr, err := r.RuntimeService.ExecSync(ctx, containerID, cmd, timeout)
	if err != nil && errors.Is(err, criclient.ErrCommandTimedOut) && !errors.Is(err, context.DeadlineExceeded) {
		return stdout, stderr, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	if _, ok := err.(interface{ ExitStatus() int }); ok {
		return stdout, stderr, err // an exit status, not a failed call
	}
	return stdout, stderr, classify(err)
}

// ContainerStats returns one container's resource usage.
func (r *Runtime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	s, err := r.RuntimeService.ContainerStats(ctx, containerID)
	return s, classify(err)
}

// ListContainerStats returns the resource usage of matching containers.
func (r *Runtime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	s, err := r.RuntimeService.ListContainerStats(ctx, filter)
	return s, classify(err)
}

// ListImages lists the runtime's images.
func (r *Runtime) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	l, err := r.ImageManagerService.ListImages(ctx, filter)
	return l, classify(err)
}

// ImageStatus returns an image's status; a missing image is a nil Image
// and no error.
func (r *Runtime) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	s, err := r.ImageManagerService.ImageStatus(ctx, image, verbose)
	return s, classify(err)
}

// PullImage pulls an image and returns its reference.
func (r *Runtime) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ref, err := r.ImageManagerService.PullImage(ctx, image, auth, podSandboxConfig)
	return ref, classify(err)
}

// RemoveImage removes an image.
func (r *Runtime) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return classify(r.ImageManagerService.RemoveImage(ctx, image))
}

// ImageFsInfo returns the usage of the filesystems images live on.
func (r *Runtime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	s, err := r.ImageManagerService.ImageFsInfo(ctx)
	return s, classify(err)
}
