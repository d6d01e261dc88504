package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/minilet/minilet/internal/errdefs"
)

// v1Required are the hierarchies a v1 machine must have; Config.Controllers
// name those used when mounted (for pods: cpuset so a runtime can place
// containers under the pod there too, pids for --pod-max-pids, hugetlb for
// completeness).
var v1Required = []string{"cpu", "cpuacct", "memory"}

// unlimitedV1 is the smallest value memory.limit_in_bytes reports as "no
// limit" (the kernel rounds LLONG_MAX down to a page).
const unlimitedV1 = uint64(1) << 62

type v1Driver struct {
	files
	naming Naming
	clk    Clock
	// mounts maps a controller to its hierarchy directory.
	mounts map[string]string
	// hiers are the distinct hierarchies (co-mounted controllers such as
	// cpu,cpuacct share one), each with the first controller found in it.
	hiers []hierarchy
}

type hierarchy struct{ mount, controller string }

var _ Driver = (*v1Driver)(nil)

func newV1(cfg Config) (*v1Driver, error) {
	d := &v1Driver{naming: cfg.Naming, clk: cfg.Clock, mounts: map[string]string{}}
	seen := map[string]bool{}
	for i, c := range append(append([]string{}, v1Required...), cfg.Controllers...) {
		dir := filepath.Join(cfg.MountRoot, c)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			if i < len(v1Required) {
				return nil, fmt.Errorf("cgroup v1 %s hierarchy not mounted at %s: %w", c, dir, errdefs.ErrUnavailable)
			}
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", dir, err)
		}
		d.mounts[c] = real
		if !seen[real] {
			seen[real] = true
			d.hiers = append(d.hiers, hierarchy{mount: real, controller: c})
		}
	}
	return d, nil
}

func (d *v1Driver) Mode() Mode         { return ModeV1 }
func (d *v1Driver) Path(n Name) string { return d.naming.Path(n) }
func (d *v1Driver) Writes() uint64     { return d.writes.Load() }

// dir returns the cgroup's directory in controller's hierarchy ("" when
// that controller is not mounted).
func (d *v1Driver) dir(controller string, n Name) string {
	m, ok := d.mounts[controller]
	if !ok {
		return ""
	}
	return filepath.Join(m, d.Path(n))
}

func (d *v1Driver) Dir(controller string, n Name) string { return d.dir(controller, n) }

func (d *v1Driver) Dirs(n Name) []Dir {
	rel := d.Path(n)
	out := make([]Dir, 0, len(d.hiers))
	for _, h := range d.hiers {
		out = append(out, Dir{Path: filepath.Join(h.mount, rel), Mount: h.mount, Controller: h.controller})
	}
	return out
}

func (d *v1Driver) Create(n Name, res *Resources) error {
	rel := d.Path(n)
	for _, h := range d.hiers {
		if err := d.mkdirAll(h.mount, rel); err != nil {
			return err
		}
	}
	return d.set(n, res)
}

// mkdirAll creates rel under hierarchy h, parents first only when needed,
// and gives new cpuset cgroups their parent's cpus and mems (a cpuset
// cgroup with none admits no task).
func (d *v1Driver) mkdirAll(h, rel string) error {
	if rel == "/" || rel == "." {
		return nil
	}
	p := filepath.Join(h, rel)
	created, err := d.mkdir(p)
	if errors.Is(err, errdefs.ErrNotFound) {
		if err := d.mkdirAll(h, filepath.Dir(rel)); err != nil {
			return err
		}
		created, err = d.mkdir(p)
	}
	if err != nil {
		return err
	}
	if created && h == d.mounts["cpuset"] {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := readString(filepath.Dir(p), f)
			if err != nil {
				return fmt.Errorf("inherit %s for %s: %w", f, p, err)
			}
			if err := d.write(p, f, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *v1Driver) Update(n Name, res *Resources) error {
	if !d.Exists(n) {
		return fmt.Errorf("cgroup %s: %w", d.Path(n), errdefs.ErrNotFound)
	}
	return d.set(n, res)
}

func (d *v1Driver) set(n Name, res *Resources) error {
	if res == nil {
		return nil
	}
	cpu := d.dir("cpu", n)
	if res.CPUShares != nil {
		if err := d.write(cpu, "cpu.shares", strconv.FormatUint(*res.CPUShares, 10)); err != nil {
			return err
		}
	}
	if res.CPUPeriod != nil {
		if err := d.write(cpu, "cpu.cfs_period_us", strconv.FormatUint(*res.CPUPeriod, 10)); err != nil {
			return err
		}
	}
	if res.CPUQuota != nil {
		if err := d.write(cpu, "cpu.cfs_quota_us", strconv.FormatInt(*res.CPUQuota, 10)); err != nil {
			return err
		}
	}
	if res.Memory != nil {
		if err := d.setMemory(d.dir("memory", n), *res.Memory, res.MemorySwap); err != nil {
			return err
		}
	}
	if res.PidsLimit != nil {
		if pids := d.dir("pids", n); pids != "" {
			if err := d.write(pids, "pids.max", limit(*res.PidsLimit)); err != nil {
				return err
			}
		}
	}
	return nil
}

// setMemory writes the memory limit and, when swap is given and the kernel
// accounts swap, the memory+swap limit. The kernel keeps memsw >= limit,
// so when raising, memsw has to go up first.
func (d *v1Driver) setMemory(dir string, limit int64, swap *int64) error {
	lim := strconv.FormatInt(limit, 10)
	if swap == nil {
		return d.write(dir, "memory.limit_in_bytes", lim)
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err != nil {
		return d.write(dir, "memory.limit_in_bytes", lim)
	}
	memsw := strconv.FormatInt(*swap, 10)
	if err := d.write(dir, "memory.limit_in_bytes", lim); err != nil {
		if err2 := d.write(dir, "memory.memsw.limit_in_bytes", memsw); err2 != nil {
			return err
		}
		return d.write(dir, "memory.limit_in_bytes", lim)
	}
	return d.write(dir, "memory.memsw.limit_in_bytes", memsw)
}

func (d *v1Driver) Exists(n Name) bool {
	for _, c := range v1Required {
		if st, err := os.Stat(d.dir(c, n)); err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

func (d *v1Driver) Pids(n Name) ([]int, error) {
	var dirs []string
	for _, dir := range d.Dirs(n) {
		dirs = append(dirs, dir.Path)
	}
	return pidsUnder(dirs...)
}

func (d *v1Driver) Kill(n Name) error { return killTree(n, d.Pids) }

func (d *v1Driver) Destroy(ctx context.Context, n Name) error {
	rel := d.Path(n)
	if rel == "/" {
		return fmt.Errorf("refusing to destroy the root cgroup: %w", errdefs.ErrInvalidArgument)
	}
	return killAndRemove(ctx, d.clk, rel, func() ([]int, error) { return d.Pids(n) }, func() error {
		for _, dir := range d.Dirs(n) {
			if err := removeTree(dir.Path, os.Remove); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *v1Driver) Join(n Name, pid int) error {
	for _, dir := range d.Dirs(n) {
		if err := d.write(dir.Path, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (d *v1Driver) Children(n Name) ([]string, error) {
	set := map[string]bool{}
	for _, dir := range d.Dirs(n) {
		kids, err := subdirs(dir.Path)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		for _, k := range kids {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func (d *v1Driver) Stats(n Name) (*Stats, error) {
	if !d.Exists(n) {
		return nil, fmt.Errorf("cgroup %s: %w", d.Path(n), errdefs.ErrNotFound)
	}
	var s Stats
	var err error
	if s.CPUUsageNanos, err = readUint(d.dir("cpuacct", n), "cpuacct.usage"); err != nil {
		return nil, err
	}
	mem := d.dir("memory", n)
	if s.MemoryUsage, err = readUint(mem, "memory.usage_in_bytes"); err != nil {
		return nil, err
	}
	ms, err := readKV(mem, "memory.stat")
	if err != nil {
		return nil, err
	}
	s.MemoryWorkingSet = s.MemoryUsage - min(s.MemoryUsage, ms["total_inactive_file"])
	s.MemoryRSS = ms["total_rss"]
	s.PageFaults, s.MajorPageFaults = ms["total_pgfault"], ms["total_pgmajfault"]
	if lim, err := readUint(mem, "memory.limit_in_bytes"); err == nil && lim < unlimitedV1 {
		s.MemoryLimit = lim
	}
	if oc, err := readKV(mem, "memory.oom_control"); err == nil {
		s.OOMKills = oc["oom_kill"]
	}
	if pids := d.dir("pids", n); pids != "" {
		s.Pids, _ = readUint(pids, "pids.current")
	}
	return &s, nil
}
