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

	"github.com/minilet/minilet/internal/errdefs"
)

// v2Delegable are the controllers a driver can enable for children in the
// ancestors' cgroup.subtree_control: cpu and memory always, the others when
// Config.Controllers names them; each only when the root offers it.
var v2Delegable = []string{"cpu", "memory", "pids", "cpuset"}

// defaultCFSPeriod is the kernel's CFS period in µs, written to cpu.max
// along with a quota when no period is given.
const defaultCFSPeriod = 100000

type v2Driver struct {
	files
	root   string
	naming Naming
	clk    Clock
	// enable is the "+cpu +memory ..." line for cgroup.subtree_control.
	enable   []string
	hasPids  bool
	plainDir bool // a plain directory tree (tests): remove with RemoveAll
}

var _ Driver = (*v2Driver)(nil)

func newV2(cfg Config, plainDir bool) (*v2Driver, error) {
	d := &v2Driver{root: cfg.MountRoot, naming: cfg.Naming, clk: cfg.Clock, plainDir: plainDir}
	avail, err := readString(cfg.MountRoot, "cgroup.controllers")
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 at %s: %w", cfg.MountRoot, err)
	}
	ctrls := strings.Fields(avail)
	for _, c := range v2Delegable {
		if has(ctrls, c) && (c == "cpu" || c == "memory" || has(cfg.Controllers, c)) {
			d.enable = append(d.enable, c)
		}
	}
	if !has(d.enable, "cpu") || !has(d.enable, "memory") {
		return nil, fmt.Errorf("cgroup v2 at %s offers %v, need cpu and memory: %w", cfg.MountRoot, ctrls, errdefs.ErrUnavailable)
	}
	d.hasPids = has(d.enable, "pids")
	return d, nil
}

func (d *v2Driver) Mode() Mode         { return ModeV2 }
func (d *v2Driver) Path(n Name) string { return d.naming.Path(n) }
func (d *v2Driver) Writes() uint64     { return d.writes.Load() }
func (d *v2Driver) dir(n Name) string  { return filepath.Join(d.root, d.Path(n)) }

// Dir is the cgroup's directory: one for every controller on v2.
func (d *v2Driver) Dir(controller string, n Name) string { return d.dir(n) }

func (d *v2Driver) Dirs(n Name) []Dir { return []Dir{{Path: d.dir(n), Mount: d.root}} }

func (d *v2Driver) Create(n Name, res *Resources) error {
	if err := d.mkdirAll(d.Path(n)); err != nil {
		return err
	}
	return d.set(n, res)
}

// mkdirAll creates rel, enabling the controllers in every ancestor's
// cgroup.subtree_control first, from the root down (a child only gets the
// controllers its parent delegates, and a parent can only delegate what its
// own parent does). Existing ancestors are delegated too: another writer
// (the embedded runtime's driver, with fewer controllers, or systemd) may
// have made them.
func (d *v2Driver) mkdirAll(rel string) error {
	if rel == "/" || rel == "." {
		return nil
	}
	var chain []string // ancestors, root first
	for p := filepath.Dir(rel); ; p = filepath.Dir(p) {
		chain = append([]string{p}, chain...)
		if p == "/" || p == "." {
			break
		}
	}
	for _, a := range chain {
		dir := filepath.Join(d.root, a)
		if _, err := os.Stat(dir); err != nil {
			if _, err := d.mkdir(dir); err != nil {
				return err
			}
		}
		if err := d.delegate(dir); err != nil {
			return err
		}
	}
	_, err := d.mkdir(filepath.Join(d.root, rel))
	return err
}

func (d *v2Driver) delegate(dir string) error {
	cur, err := readString(dir, "cgroup.subtree_control")
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	have := strings.Fields(cur)
	var add []string
	for _, c := range d.enable {
		if !has(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if d.plainDir {
		// A directory tree has no kernel to merge "+c" lines: store the set.
		return d.write(dir, "cgroup.subtree_control", strings.Join(append(have, d.enable...), " "))
	}
	return d.write(dir, "cgroup.subtree_control", strings.Join(add, " "))
}

func (d *v2Driver) Update(n Name, res *Resources) error {
	if !d.Exists(n) {
		return fmt.Errorf("cgroup %s: %w", d.Path(n), errdefs.ErrNotFound)
	}
	return d.set(n, res)
}

func (d *v2Driver) set(n Name, res *Resources) error {
	if res == nil {
		return nil
	}
	dir := d.dir(n)
	if res.CPUShares != nil {
		w := SharesToWeight(*res.CPUShares)
		if err := d.write(dir, "cpu.weight", strconv.FormatUint(w, 10)); err != nil {
			return err
		}
	}
	if res.CPUQuota != nil || res.CPUPeriod != nil {
		quota, period := int64(-1), uint64(defaultCFSPeriod)
		if res.CPUPeriod != nil {
			period = *res.CPUPeriod
		}
		if res.CPUQuota != nil {
			quota = *res.CPUQuota
		}
		if err := d.write(dir, "cpu.max", limit(quota)+" "+strconv.FormatUint(period, 10)); err != nil {
			return err
		}
	}
	if res.Memory != nil {
		if err := d.write(dir, "memory.max", limit(*res.Memory)); err != nil {
			return err
		}
		if err := d.setSwap(dir, *res.Memory, res.MemorySwap); err != nil {
			return err
		}
	}
	if res.PidsLimit != nil && d.hasPids {
		if err := d.write(dir, "pids.max", limit(*res.PidsLimit)); err != nil {
			return err
		}
	}
	return nil
}

// setSwap writes memory.swap.max, the swap allowed besides memory, from a
// memory+swap limit, where the kernel accounts swap.
func (d *v2Driver) setSwap(dir string, memory int64, memorySwap *int64) error {
	if memorySwap == nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err != nil {
		return nil
	}
	v := "max"
	if *memorySwap > 0 && memory > 0 {
		v = strconv.FormatInt(max(*memorySwap-memory, 0), 10)
	}
	return d.write(dir, "memory.swap.max", v)
}

// limit is a limit as v2 control files (and v1 pids.max) take it: "max"
// for none (v <= 0: 0 is "not set" for quotas, memory and pids), else the
// number.
func limit(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// SharesToWeight converts v1 cpu.shares to v2 cpu.weight, mapping
// [2, 262144] linearly onto [1, 10000] as the kubelet does.
func SharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	shares = max(shares, 2)
	return 1 + ((shares-2)*9999)/262142
}

func (d *v2Driver) Exists(n Name) bool {
	st, err := os.Stat(d.dir(n))
	return err == nil && st.IsDir()
}

func (d *v2Driver) Pids(n Name) ([]int, error) {
	return pidsUnder(d.dir(n))
}

func (d *v2Driver) Destroy(ctx context.Context, n Name) error {
	rel := d.Path(n)
	if rel == "/" {
		return fmt.Errorf("refusing to destroy the root cgroup: %w", errdefs.ErrInvalidArgument)
	}
	dir := d.dir(n)
	if !d.plainDir {
		// cgroup.kill (5.14+) kills the whole subtree at once, forks included.
		if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err == nil {
			_ = d.write(dir, "cgroup.kill", "1")
		}
	}
	rm := os.Remove
	if d.plainDir {
		rm = os.RemoveAll
	}
	return killAndRemove(ctx, d.clk, rel, func() ([]int, error) { return d.Pids(n) }, func() error {
		return removeTree(dir, rm)
	})
}

func (d *v2Driver) Kill(n Name) error { return killTree(n, d.Pids) }

func (d *v2Driver) Join(n Name, pid int) error {
	return d.write(d.dir(n), "cgroup.procs", strconv.Itoa(pid))
}

func (d *v2Driver) Children(n Name) ([]string, error) {
	kids, err := subdirs(d.dir(n))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	sort.Strings(kids)
	return kids, err
}

func (d *v2Driver) Stats(n Name) (*Stats, error) {
	if !d.Exists(n) {
		return nil, fmt.Errorf("cgroup %s: %w", d.Path(n), errdefs.ErrNotFound)
	}
	dir := d.dir(n)
	var s Stats
	cs, err := readKV(dir, "cpu.stat")
	if err != nil {
		return nil, err
	}
	s.CPUUsageNanos = cs["usage_usec"] * 1000
	if s.MemoryUsage, err = readUint(dir, "memory.current"); err != nil {
		return nil, err
	}
	ms, err := readKV(dir, "memory.stat")
	if err != nil {
		return nil, err
	}
	s.MemoryWorkingSet = s.MemoryUsage - min(s.MemoryUsage, ms["inactive_file"])
	s.MemoryRSS = ms["anon"]
	s.PageFaults, s.MajorPageFaults = ms["pgfault"], ms["pgmajfault"]
	s.MemoryLimit, _ = readUint(dir, "memory.max")
	if ev, err := readKV(dir, "memory.events"); err == nil {
		s.OOMKills = ev["oom_kill"]
	}
	if d.hasPids {
		s.Pids, _ = readUint(dir, "pids.current")
	}
	return &s, nil
}
