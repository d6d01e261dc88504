// Package container holds the runtime-neutral view of pods and containers
// that the sync loop, the runtime manager, PLEG, the prober and status
// generation share. It is the project's twin of the kubelet's
// kubecontainer types, trimmed to what minilet uses.
package container

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// State is a container's state as the runtime reports it.
type State string

// The container states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// ContainerStatus is one container (one attempt) as the runtime sees it.
type ContainerStatus struct {
	ID           ID     // the runtime and its container ID
	Name         string // the pod spec's container name
	State        State
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int32
	Reason       string // e.g. "OOMKilled", "Error", "Completed"
	Message      string
	Image        string
	ImageRef     string
	Hash         uint64 // hash of the spec that created it (a changed spec restarts it)
	RestartCount int    // the attempt number recorded when it was created
	LogPath      string
	// Resources are the container's resources as the runtime reports
	// them applied (nil when it does not say): what an in-place resize
	// compares with what was allocated.
	Resources *runtimeapi.LinuxContainerResources
}

// SandboxStatus is one pod sandbox as the runtime sees it.
type SandboxStatus struct {
	ID        string
	State     runtimeapi.PodSandboxState
	CreatedAt time.Time
	Attempt   uint32
	IP        string
}

// PodStatus is everything the runtime knows about one pod: its sandboxes
// (newest first) and every container attempt it still holds (newest first).
type PodStatus struct {
	UID        types.UID
	Name       string
	Namespace  string
	Sandboxes  []*SandboxStatus
	Containers []*ContainerStatus
}

// FindContainer returns the newest status of the named container, or nil.
func (s *PodStatus) FindContainer(name string) *ContainerStatus {
	if s == nil {
		return nil
	}
	var newest *ContainerStatus
	for _, c := range s.Containers {
		if c.Name == name && (newest == nil || c.CreatedAt.After(newest.CreatedAt)) {
			newest = c
		}
	}
	return newest
}

// NewestSandbox returns the newest sandbox (nil when there is none) and how
// many sandboxes are ready.
func (s *PodStatus) NewestSandbox() (newest *SandboxStatus, ready int) {
	if s == nil {
		return nil, 0
	}
	for _, sb := range s.Sandboxes {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
		if newest == nil || sb.CreatedAt.After(newest.CreatedAt) {
			newest = sb
		}
	}
	return newest, ready
}

// Pod is a pod the runtime holds, as returned by a listing (for PLEG,
// orphan cleanup and GC).
type Pod struct {
	UID        types.UID
	Name       string
	Namespace  string
	Sandboxes  []*SandboxStatus
	Containers []*ContainerStatus
}

// RunOptions are the extras other subsystems add to a container before it
// is created: device plugins add env, mounts, devices and annotations.
type RunOptions struct {
	Envs        []*runtimeapi.KeyValue
	Mounts      []*runtimeapi.Mount
	Devices     []*runtimeapi.Device
	CDIDevices  []*runtimeapi.CDIDevice // fully qualified CDI names (vendor.com/class=name)
	Annotations map[string]string
}
