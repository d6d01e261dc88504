// Package cgroups creates, updates, measures and removes cgroups on cgroup
// v1 (one hierarchy per controller) and cgroup v2 (the unified hierarchy).
// It knows nothing about pods; internal/cm decides names and values.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"k8s.io/utils/clock"

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
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
	// Clock paces Destroy's kill-and-retry loop. Default: the real clock.
	Clock clock.Clock
}

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
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
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

// files does the counted reads and writes of control files.
type files struct {
	writes atomic.Uint64
}

func (f *files) write(dir, file, value string) error {
	f.writes.Add(1)
	p := filepath.Join(dir, file)
	fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, classify(err))
	}
	_, err = fd.WriteString(value)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, classify(err))
	}
	return nil
}

func (f *files) mkdir(p string) (created bool, err error) {
	f.writes.Add(1)
	err = os.Mkdir(p, 0o755)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrExist):
		return false, nil
	}
	return false, fmt.Errorf("create cgroup %s: %w", p, classify(err))
}

func classify(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return errors.Join(err, errdefs.ErrNotFound)
	}
	return err
}

func readString(dir, file string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", classify(err)
	}
	return strings.TrimSpace(string(data)), nil
}

// readUint parses a single-number file; "max" reads as 0.
func readUint(dir, file string) (uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s/%s %q: %w", dir, file, s, err)
	}
	return v, nil
}

// readKV parses a "key value" per line file (memory.stat, cpu.stat, ...).
func readKV(dir, file string) (map[string]uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// readPids reads a cgroup.procs file.
func readPids(dir string) ([]int, error) {
	s, err := readString(dir, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(s) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// subdirs lists the child directories of dir (cgroups, in a cgroup fs).
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, classify(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// pidsUnder returns the sorted, distinct pids of dirs and all their
// descendant cgroups; a missing dir contributes none.
func pidsUnder(dirs ...string) ([]int, error) {
	seen := map[int]bool{}
	for _, dir := range dirs {
		if err := walkPids(dir, seen); err != nil {
			return nil, err
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out, nil
}

// walkPids collects the pids of dir and all descendant cgroups.
func walkPids(dir string, seen map[int]bool) error {
	pids, err := readPids(dir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	}
	for _, p := range pids {
		seen[p] = true
	}
	kids, err := subdirs(dir)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	}
	for _, k := range kids {
		if err := walkPids(filepath.Join(dir, k), seen); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes dir's descendant cgroups deepest first, then dir.
// rm is os.Remove on a cgroup fs (rmdir) and os.RemoveAll for plain
// directory trees in tests. A leaf is removed without listing it first.
func removeTree(dir string, rm func(string) error) error {
	err := rm(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	kids, lerr := subdirs(dir)
	if lerr != nil {
		if errors.Is(lerr, errdefs.ErrNotFound) {
			return nil
		}
		return lerr
	}
	if len(kids) == 0 {
		return err // busy for another reason (processes): report it
	}
	for _, k := range kids {
		if err := removeTree(filepath.Join(dir, k), rm); err != nil {
			return err
		}
	}
	if err := rm(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
