package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// v1Required are the hierarchies a v1 machine must have; v1Optional are
// used when mounted (cpuset so a runtime can place containers under the pod
// there too, pids for --pod-max-pids, hugetlb for completeness).
var (
	v1Required = []string{"cpu", "cpuacct", "memory"}
	v1Optional = []string{"cpuset", "pids", "hugetlb"}
)

// unlimitedV1 is the smallest value memory.limit_in_bytes reports as "no
// limit" (the kernel rounds LLONG_MAX down to a page).
const unlimitedV1 = uint64(1) << 62

type v1Driver struct {
	files
	naming Naming
	clk    clock.Clock
	// mounts maps a controller to its hierarchy directory.
	mounts map[string]string
	// dirs are the distinct hierarchy directories (co-mounted controllers
	// such as cpu,cpuacct share one).
	dirs []string
}

var _ Driver = (*v1Driver)(nil)

func newV1(cfg Config) (*v1Driver, error) {
	d := &v1Driver{naming: cfg.Naming, clk: cfg.Clock, mounts: map[string]string{}}
	seen := map[string]bool{}
	for i, c := range append(append([]string{}, v1Required...), v1Optional...) {
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
			d.dirs = append(d.dirs, real)
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

func (d *v1Driver) Create(n Name, res *Resources) error {
	rel := d.Path(n)
	for _, h := range d.dirs {
		if err := d.mkdirAll(h, rel); err != nil {
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
		if err := d.write(d.dir("memory", n), "memory.limit_in_bytes", strconv.FormatInt(*res.Memory, 10)); err != nil {
			return err
		}
	}
	if res.PidsLimit != nil {
		if pids := d.dir("pids", n); pids != "" {
			v := "max"
			if *res.PidsLimit > 0 {
				v = strconv.FormatInt(*res.PidsLimit, 10)
			}
			if err := d.write(pids, "pids.max", v); err != nil {
				return err
			}
		}
	}
	return nil
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
	rel := d.Path(n)
	dirs := make([]string, 0, len(d.dirs))
	for _, h := range d.dirs {
		dirs = append(dirs, filepath.Join(h, rel))
	}
	return pidsUnder(dirs...)
}

func (d *v1Driver) Destroy(ctx context.Context, n Name) error {
	rel := d.Path(n)
	if rel == "/" {
		return fmt.Errorf("refusing to destroy the root cgroup: %w", errdefs.ErrInvalidArgument)
	}
	return killAndRemove(ctx, d.clk, rel, func() ([]int, error) { return d.Pids(n) }, func() error {
		for _, h := range d.dirs {
			if err := removeTree(filepath.Join(h, rel), os.Remove); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *v1Driver) Join(n Name, pid int) error {
	rel := d.Path(n)
	for _, h := range d.dirs {
		if err := d.write(filepath.Join(h, rel), "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (d *v1Driver) Children(n Name) ([]string, error) {
	set := map[string]bool{}
	rel := d.Path(n)
	for _, h := range d.dirs {
		kids, err := subdirs(filepath.Join(h, rel))
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
	if oc, err := readString(mem, "memory.oom_control"); err == nil {
		s.OOMKills = oomKillField(oc)
	}
	if pids := d.dir("pids", n); pids != "" {
		s.Pids, _ = readUint(pids, "pids.current")
	}
	return &s, nil
}

// oomKillField returns the "oom_kill N" value of memory.oom_control or
// memory.events.
func oomKillField(s string) uint64 {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
