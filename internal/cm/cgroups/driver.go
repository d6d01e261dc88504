// Package cgroups creates, updates, measures and removes cgroups on cgroup
// v1 (one hierarchy per controller, split or co-mounted) and cgroup v2 (the
// unified hierarchy). It is minilet's one cgroup driver: internal/cm places
// pods in it, the embedded runtime its containers, and the container
// monitor joins, watches and empties container cgroups with it. It knows
// nothing about pods or containers: its callers decide names and values.
//
// It imports only the standard library, golang.org/x/sys and
// internal/errdefs, so that the small cmd/minilet-monitor binary can use it.
package cgroups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

// DefaultMountRoot is where the cgroup filesystems are mounted.
const DefaultMountRoot = "/sys/fs/cgroup"

// Mode is the cgroup version a driver writes.
type Mode int

// The cgroup versions.
const (
	// ModeAuto detects the version (New only).
	ModeAuto Mode = iota
	// ModeV1 is the legacy per-controller hierarchies.
	ModeV1
	// ModeV2 is the unified hierarchy.
	ModeV2
)

func (m Mode) String() string {
	switch m {
	case ModeV1:
		return "v1"
	case ModeV2:
		return "v2"
	}
	return "auto"
}

// Resources are the values a cgroup is given. A nil field is left as it is.
type Resources struct {
	// CPUShares is the v1 cpu.shares (converted to cpu.weight on v2).
	CPUShares *uint64
	// CPUQuota is the CFS quota in µs; -1 means unlimited.
	CPUQuota *int64
	// CPUPeriod is the CFS period in µs.
	CPUPeriod *uint64
	// Memory is the memory limit in bytes; -1 means unlimited.
	Memory *int64
	// MemorySwap, set together with Memory, is the limit of memory plus
	// swap in bytes: v1 memory.memsw.limit_in_bytes, v2 memory.swap.max
	// (MemorySwap minus Memory), each only where the kernel accounts swap.
	MemorySwap *int64
	// PidsLimit is the maximum number of tasks; -1 means unlimited.
	PidsLimit *int64
}

// Stats are a cgroup's usage counters (including all its descendants).
type Stats struct {
	// CPUUsageNanos is the cumulative CPU time used, in nanoseconds.
	CPUUsageNanos uint64
	// MemoryUsage is the charged memory in bytes, page cache included.
	MemoryUsage uint64
	// MemoryWorkingSet is MemoryUsage minus inactive file pages.
	MemoryWorkingSet uint64
	// MemoryRSS is anonymous memory (and swap cache) in bytes.
	MemoryRSS uint64
	// PageFaults and MajorPageFaults are cumulative fault counts.
	PageFaults, MajorPageFaults uint64
	// MemoryLimit is the memory limit in bytes; 0 when unlimited.
	MemoryLimit uint64
	// OOMKills counts processes the kernel OOM-killed in this cgroup.
	OOMKills uint64
	// Pids is the number of tasks in the cgroup (0 without the pids controller).
	Pids uint64
}

// Dir is a cgroup's directory in one hierarchy.
type Dir struct {
	// Path is the cgroup's directory.
	Path string
	// Mount is the hierarchy's root directory.
	Mount string
	// Controller is one controller of the hierarchy (v1), by which a process
	// finds its own cgroup there (see Self); empty on v2.
	Controller string
}

// Driver manages cgroups by Name. Implementations are safe for concurrent
// use on different names.
type Driver interface {
	// Mode is the cgroup version this driver writes.
	Mode() Mode
	// Path is the name's path relative to each hierarchy root; this is the
	// CRI CgroupParent.
	Path(n Name) string
	// Create makes the cgroup (and missing parents) and applies res.
	Create(n Name, res *Resources) error
	// Update applies res to an existing cgroup (errdefs.ErrNotFound if missing).
	Update(n Name, res *Resources) error
	// Exists reports whether the cgroup exists in every required controller.
	Exists(n Name) bool
	// Destroy kills every process left in the cgroup and its descendants and
	// removes them all. Destroying a missing cgroup is not an error.
	Destroy(ctx context.Context, n Name) error
	// Stats reads the cgroup's usage counters.
	Stats(n Name) (*Stats, error)
	// Pids lists the processes in the cgroup and all its descendants.
	Pids(n Name) ([]int, error)
	// Join moves process pid into the cgroup.
	Join(n Name, pid int) error
	// Kill sends SIGKILL to every process in the cgroup and its
	// descendants (never to the caller or to pid 1).
	Kill(n Name) error
	// Dirs are the cgroup's directories, one per hierarchy.
	Dirs(n Name) []Dir
	// Dir is the cgroup's directory in the hierarchy of controller ("" when
	// that controller is not used).
	Dir(controller string, n Name) string
	// Children lists the names of the cgroup's direct child cgroups.
	Children(n Name) ([]string, error)
	// Writes counts control-file writes and directory creations so far.
	Writes() uint64
}

// Config configures a driver.
type Config struct {
	// MountRoot is where cgroup filesystems are mounted. Default /sys/fs/cgroup.
	MountRoot string
	// Mode forces a cgroup version. Default ModeAuto (detect).
	Mode Mode
	// Naming is the path scheme. Default NamingCgroupfs.
	Naming Naming
	// Controllers are the controllers used when the machine has them,
	// besides cpu, cpuacct and memory, which are always used: on v1 the
	// hierarchies cgroups are made in, on v2 the controllers delegated to
	// children (cpuset and pids; cpuacct is part of cpu there). Default
	// DefaultControllers.
	Controllers []string
	// Clock paces Destroy's kill-and-retry loop. Default: the real clock.
	Clock Clock
}

// DefaultControllers are Config.Controllers by default: pods are placed in
// cpusets too, and can be given a pids limit.
var DefaultControllers = []string{"cpuset", "pids", "hugetlb"}

// Clock is the part of k8s.io/utils/clock.Clock the driver waits with;
// that package's clocks, real and fake, satisfy it. (The package itself is
// not imported, to keep the monitor binary small.)
type Clock interface {
	After(d time.Duration) <-chan time.Time
}

// realClock is the default Clock.
type realClock struct{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// New returns a driver for the machine's cgroups.
func New(cfg Config) (Driver, error) {
	if cfg.MountRoot == "" {
		cfg.MountRoot = DefaultMountRoot
	}
	if cfg.Naming == "" {
		cfg.Naming = NamingCgroupfs
	}
	if !validNaming(cfg.Naming) {
		return nil, fmt.Errorf("cgroup driver %q: must be %q or %q: %w", cfg.Naming, NamingCgroupfs, NamingSystemd, errdefs.ErrInvalidArgument)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Controllers == nil {
		cfg.Controllers = DefaultControllers
	}
	mode := cfg.Mode
	if mode == ModeAuto {
		var err error
		if mode, err = Detect(cfg.MountRoot); err != nil {
			return nil, err
		}
	}
	switch mode {
	case ModeV1:
		return newV1(cfg)
	case ModeV2:
		return newV2(cfg, false)
	}
	return nil, fmt.Errorf("cgroup mode %d: %w", mode, errdefs.ErrInvalidArgument)
}

// Detect reports which cgroup version is usable under mountRoot: v2 when
// the root is a unified hierarchy offering the cpu and memory controllers,
// v1 when the cpu, cpuacct and memory hierarchies are mounted below it. A
// hybrid machine (v1 hierarchies plus an empty cgroup2 at "unified") is v1.
func Detect(mountRoot string) (Mode, error) {
	if data, err := os.ReadFile(filepath.Join(mountRoot, "cgroup.controllers")); err == nil {
		ctrls := strings.Fields(string(data))
		if has(ctrls, "cpu") && has(ctrls, "memory") {
			return ModeV2, nil
		}
		return ModeAuto, fmt.Errorf("cgroup v2 at %s offers controllers %v, need cpu and memory: %w", mountRoot, ctrls, errdefs.ErrUnavailable)
	}
	for _, c := range v1Required {
		if _, err := os.Stat(filepath.Join(mountRoot, c, "cgroup.procs")); err != nil {
			return ModeAuto, fmt.Errorf("no cgroup v2 at %s and no v1 %s hierarchy: %w", mountRoot, c, errdefs.ErrUnavailable)
		}
	}
	return ModeV1, nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
