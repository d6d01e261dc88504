package embedded

import (
	"context"

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
