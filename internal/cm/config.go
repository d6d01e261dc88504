package cm

import (
	"fmt"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
)

// DefaultMaxPods is the kubelet's default --max-pods.
const DefaultMaxPods = 110

// ExtendedResources supplies extended resources (device plugins) to merge
// into the node's capacity and allocatable and to check at admission.
type ExtendedResources interface {
	// Resources reports every resource: capacity counts all its devices,
	// healthy or not, allocatable only the healthy ones (as the kubelet).
	Resources() (capacity, allocatable v1.ResourceList)
	// InUse counts the devices pods hold, by resource, including those
	// restored from the checkpoint whose plugin has not registered again.
	InUse() v1.ResourceList
}

// Config configures the container manager. Fields document their default.
type Config struct {
	// NodeName names the node in the Summary API. Default: os.Hostname.
	NodeName string
	// RootDir is the agent's root directory; its filesystem is the node's
	// ephemeral-storage capacity. Default "/".
	RootDir string
	// CgroupRoot is --cgroup-root, the cgroupfs path under which kubepods
	// lives (e.g. "/minilet"). Default "/".
	CgroupRoot string
	// Owner is the agent's root dir. When set, Start takes CgroupRoot for
	// this agent alone (a lock in LockDir, held until Close or the
	// process's death) and refuses a root another agent holds or left pods
	// in. Default "": no lock (tests).
	Owner string
	// LockDir holds the cgroup roots' lock files. Default DefaultLockDir.
	LockDir string
	// CgroupsPerQOS is --cgroups-per-qos (the kubelet defaults it to true):
	// create kubepods, the QoS tiers and a cgroup per pod. When false, pods
	// are placed directly in CgroupRoot and no pod cgroups are made.
	CgroupsPerQOS bool
	// CgroupDriver is --cgroup-driver, the naming: "cgroupfs" (default) or
	// "systemd" (systemd slice names; cgroups are still written directly).
	CgroupDriver string
	// CgroupMountRoot is where cgroup filesystems are mounted. Default
	// /sys/fs/cgroup.
	CgroupMountRoot string
	// MaxPods is the node's pod capacity. Default 110.
	MaxPods int64
	// KubeReserved and SystemReserved are --kube-reserved and
	// --system-reserved (cpu, memory, ephemeral-storage, pid). Default none.
	KubeReserved, SystemReserved v1.ResourceList
	// EvictionHard are the hard eviction thresholds in KubeletConfiguration
	// form ("memory.available": "100Mi", "nodefs.available": "10%"); the
	// memory.available and nodefs.available ones are subtracted from
	// allocatable. Default none (the config layer applies the kubelet's).
	EvictionHard map[string]string
	// EnforceNodeAllocatable is --enforce-node-allocatable; with "pods" the
	// kubepods cgroup is limited to capacity minus reservations. nil means
	// the kubelet default ["pods"]; ["none"] or empty disables it.
	EnforceNodeAllocatable []string
	// QOSReservedMemoryPercent is --qos-reserved=memory=N% (0..100): the
	// share of higher tiers' memory requests kept from lower tiers. Default 0.
	QOSReservedMemoryPercent int64
	// PodPidsLimit is --pod-max-pids; <= 0 means unlimited. Default 0.
	PodPidsLimit int64
	// Extended supplies extended resources (optional).
	Extended ExtendedResources
	// CapacityOverride replaces detected capacity values per resource
	// (optional; for tests and for advertising less than the machine has).
	CapacityOverride v1.ResourceList
	// Driver replaces the detected cgroup driver (optional; tests).
	Driver cgroups.Driver
	// Clock stamps stats and paces retries. Default: the real clock.
	Clock clock.Clock
	// Logger receives the manager's logs. Default: slog.Default().
	Logger *slog.Logger
	// Recorder receives pod events. Default: events.Nop.
	Recorder events.Recorder
}

// enforcePods reports whether "pods" is in EnforceNodeAllocatable.
func (c *Config) enforcePods() bool {
	if c.EnforceNodeAllocatable == nil {
		return true
	}
	for _, v := range c.EnforceNodeAllocatable {
		if v == "pods" {
			return true
		}
	}
	return false
}

func (c *Config) validate() error {
	if c.MaxPods < 0 {
		return fmt.Errorf("maxPods %d: must not be negative: %w", c.MaxPods, errdefs.ErrInvalidArgument)
	}
	if c.QOSReservedMemoryPercent < 0 || c.QOSReservedMemoryPercent > 100 {
		return fmt.Errorf("qosReserved[memory] %d%%: must be within 0..100: %w", c.QOSReservedMemoryPercent, errdefs.ErrInvalidArgument)
	}
	for field, l := range map[string]v1.ResourceList{"kubeReserved": c.KubeReserved, "systemReserved": c.SystemReserved, "capacityOverride": c.CapacityOverride} {
		for name, q := range l {
			if q.Sign() < 0 {
				return fmt.Errorf("%s[%s] %s: must not be negative: %w", field, name, q.String(), errdefs.ErrInvalidArgument)
			}
		}
	}
	for _, v := range c.EnforceNodeAllocatable {
		switch v {
		case "pods", "none", "kube-reserved", "system-reserved":
		default:
			return fmt.Errorf("enforceNodeAllocatable %q: must be pods, system-reserved, kube-reserved or none: %w", v, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
