package embedded

import (
	"context"
	"maps"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats reads a container's CPU and memory use from its cgroup.
func (r *Runtime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	c, st, err := r.ctrs.Stats(containerID)
	if err != nil {
		return nil, criErr(err)
	}
	return r.criStats(&c, st), nil
}

// ListContainerStats returns the stats of running containers matching filter.
func (r *Runtime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	var out []*runtimeapi.ContainerStats
	for _, c := range r.ctrs.List() {
		if c.State() != supervisor.Running {
			continue
		}
		if filter != nil {
			if filter.GetId() != "" && !matchID(c.ID, filter.GetId()) {
				continue
			}
			if filter.GetPodSandboxId() != "" && !matchID(c.SandboxID, filter.GetPodSandboxId()) {
				continue
			}
			if !matchLabels(c.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		c, st, err := r.ctrs.Stats(c.ID)
		if err != nil {
			continue // exited (and cleaned up) meanwhile
		}
		out = append(out, r.criStats(&c, st))
	}
	return out, nil
}

func (r *Runtime) criStats(c *supervisor.Container, s *cgroups.Stats) *runtimeapi.ContainerStats {
	now := r.clock.Now().UnixNano()
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id:          c.ID,
			Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
			Labels:      maps.Clone(c.Labels),
			Annotations: maps.Clone(c.Annotations),
		},
		Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.CPUUsageNanos}},
		Memory: &runtimeapi.MemoryUsage{
			Timestamp:       now,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: s.MemoryWorkingSet},
			UsageBytes:      &runtimeapi.UInt64Value{Value: s.MemoryUsage},
			RssBytes:        &runtimeapi.UInt64Value{Value: s.MemoryRSS},
		},
	}
}
