package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
)

// ContainerControllers are the cgroup controllers containers are placed in
// besides cpu, cpuacct and memory: not cpuset (they stay in their pod's).
// The Config's Cgroups driver is made with these (cgroups.Config.Controllers).
var ContainerControllers = []string{"pids"}

// removeCgroupTimeout bounds how long removing a container's cgroup waits
// for the kernel to tear its killed processes down.
const removeCgroupTimeout = 20 * time.Second

// cgroupName is the name of a container's cgroup path (<parent>/<id>).
func cgroupName(rel string) (cgroups.Name, error) {
	n, err := cgroups.ParseCgroupfs(rel)
	if err == nil && len(n) == 0 {
		err = fmt.Errorf("container cgroup path %q is the root cgroup", rel)
	}
	return n, err
}

// removeCgroup kills what is left in a container's cgroup and deletes it.
func (s *Supervisor) removeCgroup(rel string) error {
	n, err := cgroupName(rel)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeCgroupTimeout)
	defer cancel()
	return s.cg.Destroy(ctx, n)
}

// Stats returns a snapshot of container id and the usage counters of its
// cgroup.
func (s *Supervisor) Stats(id string) (Container, *cgroups.Stats, error) {
	c, err := s.Get(id)
	if err != nil {
		return Container{}, nil, err
	}
	n, err := cgroupName(c.CgroupPath)
	var st *cgroups.Stats
	if err == nil {
		st, err = s.cg.Stats(n)
	}
	if err != nil {
		return c, nil, fmt.Errorf("stats of container %s: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	return c, st, nil
}

// cgroupResources turns a container's resources into cgroup values. Zero
// fields are left alone (CRI: 0 means "not specified"); a memory limit
// comes with an equal memory+swap limit unless one is given, so that the
// limit is not dodged by swapping.
func cgroupResources(res *Resources) *cgroups.Resources {
	if res == nil {
		return nil
	}
	var out cgroups.Resources
	if res.CPUShares > 0 {
		shares := uint64(res.CPUShares)
		out.CPUShares = &shares
	}
	if res.CPUPeriod > 0 {
		period := uint64(res.CPUPeriod)
		out.CPUPeriod = &period
	}
	if res.CPUQuota != 0 {
		out.CPUQuota = &res.CPUQuota
	}
	if res.MemoryLimit > 0 {
		swap := res.MemorySwapLimit
		if swap <= 0 {
			swap = res.MemoryLimit
		}
		out.Memory, out.MemorySwap = &res.MemoryLimit, &swap
	}
	if res.PidsLimit > 0 {
		out.PidsLimit = &res.PidsLimit
	}
	return &out
}
