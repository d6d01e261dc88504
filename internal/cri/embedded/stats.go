package embedded

import (
	"context"
	"maps"

	"github.com/minilet/minilet/internal/cm/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats reads a container's CPU and memory use from its cgroup.
func (r *Runtime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	r.mu.Lock()
	c, ok := r.containers[containerID]
	if !ok {
		r.mu.Unlock()
		return nil, errNotFound("container %q", containerID)
	}
	rec := c.rec
	r.mu.Unlock()
	return r.statsOf(&rec)
}

// ListContainerStats returns the stats of running containers matching filter.
func (r *Runtime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	r.mu.Lock()
	var recs []containerRecord
	for _, c := range r.containers {
		if c.state() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if filter != nil {
			if filter.GetId() != "" && !matchID(c.rec.ID, filter.GetId()) {
				continue
			}
			if filter.GetPodSandboxId() != "" && !matchID(c.rec.SandboxID, filter.GetPodSandboxId()) {
				continue
			}
			if !matchLabels(c.rec.Labels, filter.GetLabelSelector()) {
				continue
			}
		}
		recs = append(recs, c.rec)
	}
	r.mu.Unlock()
	var out []*runtimeapi.ContainerStats
	for i := range recs {
		s, err := r.statsOf(&recs[i])
		if err != nil {
			continue // exited (and cleaned up) meanwhile
		}
		out = append(out, s)
	}
	return out, nil
}

func (r *Runtime) statsOf(rec *containerRecord) (*runtimeapi.ContainerStats, error) {
	n, err := cgroupName(rec.CgroupPath)
	var s *cgroups.Stats
	if err == nil {
		s, err = r.cg.Stats(n)
	}
	if err != nil {
		return nil, errUnavailable("stats of container %s: %v", rec.ID, err)
	}
	now := r.clock.Now().UnixNano()
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id:          rec.ID,
			Metadata:    &runtimeapi.ContainerMetadata{Name: rec.Name, Attempt: rec.Attempt},
			Labels:      maps.Clone(rec.Labels),
			Annotations: maps.Clone(rec.Annotations),
		},
		Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.CPUUsageNanos}},
		Memory: &runtimeapi.MemoryUsage{
			Timestamp:       now,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: s.MemoryWorkingSet},
			UsageBytes:      &runtimeapi.UInt64Value{Value: s.MemoryUsage},
			RssBytes:        &runtimeapi.UInt64Value{Value: s.MemoryRSS},
		},
	}, nil
}
