package cm

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/qos"
)

// podCgroupResources is what the kubelet writes to a pod cgroup:
// Guaranteed pods get shares from the summed requests, quota from the
// summed limits and the summed memory limit; Burstable pods get shares and
// a quota or memory limit only when every container sets that limit;
// BestEffort pods get the minimum shares. Unset limits are written as
// unlimited so a reused cgroup keeps no stale value.
func podCgroupResources(pod *v1.Pod, pidsLimit int64) *cgroups.Resources {
	reqs, lims := qos.PodRequests(pod), qos.PodLimits(pod)
	period := uint64(qos.DefaultCFSPeriod)
	shares := qos.MilliCPUToShares(qos.MilliCPU(reqs))
	quota := int64(qos.NoQuota)
	memory := int64(-1)
	switch qos.PodQOSClass(pod) {
	case v1.PodQOSGuaranteed:
		quota = qos.MilliCPUToQuota(qos.MilliCPU(lims), int64(period))
		memory = qos.MemoryBytes(lims)
	case v1.PodQOSBurstable:
		if qos.AllContainersLimit(pod, v1.ResourceCPU) {
			quota = qos.MilliCPUToQuota(qos.MilliCPU(lims), int64(period))
		}
		if qos.AllContainersLimit(pod, v1.ResourceMemory) {
			memory = qos.MemoryBytes(lims)
		}
	default:
		shares = qos.MinShares
	}
	pids := int64(-1)
	if pidsLimit > 0 {
		pids = pidsLimit
	}
	return &cgroups.Resources{CPUShares: &shares, CPUQuota: &quota, CPUPeriod: &period, Memory: &memory, PidsLimit: &pids}
}

// containerResources is the CRI LinuxContainerResources for container c:
// shares from the cpu request (the limit when only a limit is set), a CFS
// quota from the cpu limit (-1 without one), the memory limit (0 means
// none, as in CRI) and the OOM score policy. A limit the container leaves
// unset is the pod-level one (spec.resources), as the kubelet does.
func containerResources(pod *v1.Pod, c *v1.Container, memoryCapacity int64) *runtimeapi.LinuxContainerResources {
	limits := c.Resources.Limits
	if qos.PodLevelResourcesSet(pod) {
		limits = limits.DeepCopy()
		if limits == nil {
			limits = v1.ResourceList{}
		}
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := limits[name]; (!ok || q.IsZero()) && pod.Spec.Resources.Limits != nil {
				if pl, ok := pod.Spec.Resources.Limits[name]; ok {
					limits[name] = pl.DeepCopy()
				}
			}
		}
	}
	cpuReq := qos.MilliCPU(c.Resources.Requests)
	cpuLim := qos.MilliCPU(limits)
	if cpuReq == 0 && cpuLim > 0 {
		cpuReq = cpuLim
	}
	return &runtimeapi.LinuxContainerResources{
		CpuShares:          int64(qos.MilliCPUToShares(cpuReq)),
		CpuQuota:           qos.MilliCPUToQuota(cpuLim, qos.DefaultCFSPeriod),
		CpuPeriod:          qos.DefaultCFSPeriod,
		MemoryLimitInBytes: qos.MemoryBytes(limits),
		OomScoreAdj:        int64(qos.ContainerOOMScoreAdj(pod, c, memoryCapacity)),
	}
}

// ValidatePodResources rejects what an API server would: negative
// quantities and requests above limits. The error names the field, e.g.
// spec.containers[0].resources.requests[cpu].
func ValidatePodResources(pod *v1.Pod) error {
	check := func(kind string, cs []v1.Container) error {
		for i := range cs {
			r := &cs[i].Resources
			base := fmt.Sprintf("spec.%s[%d](%s).resources", kind, i, cs[i].Name)
			for _, part := range []struct {
				name string
				l    v1.ResourceList
			}{{"requests", r.Requests}, {"limits", r.Limits}} {
				for name, q := range part.l {
					if q.Sign() < 0 {
						return fmt.Errorf("pod %s/%s: %s.%s[%s] %s: must not be negative: %w",
							pod.Namespace, pod.Name, base, part.name, name, q.String(), errdefs.ErrInvalidArgument)
					}
				}
			}
			for name, req := range r.Requests {
				if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
					return fmt.Errorf("pod %s/%s: %s.requests[%s] %s: must be less than or equal to %s limit %s: %w",
						pod.Namespace, pod.Name, base, name, req.String(), name, lim.String(), errdefs.ErrInvalidArgument)
				}
			}
		}
		return nil
	}
	if err := check("initContainers", pod.Spec.InitContainers); err != nil {
		return err
	}
	if err := check("containers", pod.Spec.Containers); err != nil {
		return err
	}
	for name, q := range pod.Spec.Overhead {
		if q.Sign() < 0 {
			return fmt.Errorf("pod %s/%s: spec.overhead[%s] %s: must not be negative: %w",
				pod.Namespace, pod.Name, name, q.String(), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
