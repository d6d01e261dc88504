package embedded

import (
	"context"
	"syscall"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The runtime is a CRI runtime and image service.
var (
	_ criapi.RuntimeService      = (*Runtime)(nil)
	_ criapi.ImageManagerService = (*Runtime)(nil)
)

// Names reported by Version.
const (
	RuntimeName       = "minilet-embedded"
	RuntimeVersion    = "0.1.0"
	runtimeAPIVersion = "v1"
)

// Version reports the runtime's name and version.
func (r *Runtime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version: "0.1.0", RuntimeName: RuntimeName, RuntimeVersion: RuntimeVersion, RuntimeApiVersion: runtimeAPIVersion,
	}, nil
}

// Status reports the runtime and its (host) network ready.
func (r *Runtime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// UpdateRuntimeConfig accepts and ignores the pod CIDR: pods use the host
// network.
func (r *Runtime) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	return nil
}

// RuntimeConfig reports the cgroupfs cgroup driver.
func (r *Runtime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}}, nil
}

// ImageFsInfo reports the usage of the filesystem holding the runtime state.
func (r *Runtime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.stateDir, &st); err != nil {
		return nil, errUnavailable("image filesystem info: %v", err)
	}
	usage := &runtimeapi.FilesystemUsage{
		Timestamp:  r.clock.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: r.stateDir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: (st.Blocks - st.Bfree) * uint64(st.Bsize)},
		InodesUsed: &runtimeapi.UInt64Value{Value: st.Files - st.Ffree},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{usage}}, nil
}

// ListImages lists the images: only "host" so far.
func (r *Runtime) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if ref := filter.GetImage().GetImage(); ref != "" && ref != hostImage {
		return nil, nil
	}
	return []*runtimeapi.Image{hostImageInfo()}, nil
}

// ImageStatus reports an image; a missing image is a nil Image, not an error
// (CRI).
func (r *Runtime) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	if isHostImage(image.GetImage()) {
		return &runtimeapi.ImageStatusResponse{Image: hostImageInfo()}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

// PullImage "pulls" the host image; other images are not available yet.
func (r *Runtime) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	if isHostImage(image.GetImage()) {
		return hostImage, nil
	}
	return "", errNotFound("pull image %q: the embedded runtime has no image store yet", image.GetImage())
}

// RemoveImage refuses to remove the host image and ignores unknown ones.
func (r *Runtime) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	if isHostImage(image.GetImage()) {
		return errInvalid("remove image: field image %q is the host filesystem and cannot be removed", hostImage)
	}
	return nil
}

func hostImageInfo() *runtimeapi.Image {
	return &runtimeapi.Image{Id: hostImage, RepoTags: []string{hostImage}, Size: 1, Pinned: true} // CRI wants size > 0; the host filesystem is not ours to count
}

// Exec is not implemented (no streaming server).
func (r *Runtime) Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, errUnimplemented("Exec")
}

// Attach is not implemented (no streaming server).
func (r *Runtime) Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return nil, errUnimplemented("Attach")
}

// PortForward is not implemented (pods use the host network).
func (r *Runtime) PortForward(context.Context, *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, errUnimplemented("PortForward")
}

// CheckpointContainer is not implemented.
func (r *Runtime) CheckpointContainer(context.Context, *runtimeapi.CheckpointContainerRequest) error {
	return errUnimplemented("CheckpointContainer")
}

// GetContainerEvents is not implemented; use Changes.
func (r *Runtime) GetContainerEvents(context.Context, chan *runtimeapi.ContainerEventResponse, func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return errUnimplemented("GetContainerEvents")
}

// UpdatePodSandboxResources is accepted as a no-op: the pod cgroup is the
// kubelet's, containers have their own.
func (r *Runtime) UpdatePodSandboxResources(context.Context, *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// CheckpointPod is not implemented.
func (r *Runtime) CheckpointPod(context.Context, *runtimeapi.CheckpointPodRequest) error {
	return errUnimplemented("CheckpointPod")
}

// RestorePod is not implemented.
func (r *Runtime) RestorePod(context.Context, *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return nil, errUnimplemented("RestorePod")
}

// PodSandboxStats is not implemented.
func (r *Runtime) PodSandboxStats(context.Context, string) (*runtimeapi.PodSandboxStats, error) {
	return nil, errUnimplemented("PodSandboxStats")
}

// ListPodSandboxStats is not implemented.
func (r *Runtime) ListPodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return nil, errUnimplemented("ListPodSandboxStats")
}

// ListMetricDescriptors is not implemented.
func (r *Runtime) ListMetricDescriptors(context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return nil, errUnimplemented("ListMetricDescriptors")
}

// ListPodSandboxMetrics is not implemented.
func (r *Runtime) ListPodSandboxMetrics(context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return nil, errUnimplemented("ListPodSandboxMetrics")
}
