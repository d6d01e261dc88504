package embedded

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchy is one mounted cgroup hierarchy the runtime places containers in.
// Controller names one controller of the hierarchy (v1) and is empty for the
// v2 unified hierarchy; the monitor uses it to find its own cgroup there.
type hierarchy struct {
	Mount      string
	Controller string
}

// cgroupDriver creates, configures, reads and removes container cgroups.
type cgroupDriver struct {
	v2    bool
	hiers []hierarchy // v1: one per mount of cpu, cpuacct, memory, pids
	byCtl map[string]string
}

// wantedControllers are the v1 controllers a container cgroup is created in.
var wantedControllers = []string{"cpu", "cpuacct", "memory", "pids"}

// detectCgroups inspects mount: a cgroup2 filesystem with controllers means
// v2; otherwise the v1 hierarchies mounted below it are used.
func detectCgroups(mount string) (*cgroupDriver, error) {
	d := &cgroupDriver{byCtl: map[string]string{}}
	if data, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers")); err == nil && len(strings.TrimSpace(string(data))) > 0 {
		d.v2 = true
		d.hiers = []hierarchy{{Mount: mount}}
		for _, c := range []string{"cpu", "cpuacct", "memory", "pids"} {
			d.byCtl[c] = mount
		}
		return d, nil
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[2] != "cgroup" || !strings.HasPrefix(fields[1], mount) {
			continue
		}
		opts := map[string]bool{}
		for _, o := range strings.Split(fields[3], ",") {
			opts[o] = true
		}
		for _, c := range wantedControllers {
			if !opts[c] {
				continue
			}
			d.byCtl[c] = fields[1]
			if !seen[fields[1]] {
				seen[fields[1]] = true
				d.hiers = append(d.hiers, hierarchy{Mount: fields[1], Controller: c})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(d.hiers) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy (cpu, cpuacct, memory, pids) or cgroup v2 with controllers under %s", mount)
	}
	return d, nil
}

// containerDirs describes rel in every hierarchy, for the monitor.
func (d *cgroupDriver) containerDirs(rel string) []cgroupDir {
	out := make([]cgroupDir, 0, len(d.hiers))
	for _, h := range d.hiers {
		out = append(out, cgroupDir{Dir: filepath.Join(h.Mount, rel), Root: h.Mount, Controller: h.Controller})
	}
	return out
}

// dirs returns the container's cgroup directory in every hierarchy.
func (d *cgroupDriver) dirs(rel string) []string {
	out := make([]string, 0, len(d.hiers))
	for _, h := range d.hiers {
		out = append(out, filepath.Join(h.Mount, rel))
	}
	return out
}

// dir returns the cgroup directory of rel in the hierarchy holding ctl, or "".
func (d *cgroupDriver) dir(ctl, rel string) string {
	m, ok := d.byCtl[ctl]
	if !ok {
		return ""
	}
	return filepath.Join(m, rel)
}

// create makes rel in every hierarchy (and, on v2, delegates the controllers
// down to it).
func (d *cgroupDriver) create(rel string) error {
	for _, dir := range d.dirs(rel) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
	}
	if d.v2 {
		// Enable controllers on every ancestor so the leaf gets the files.
		parts := strings.Split(strings.Trim(filepath.Clean(rel), "/"), "/")
		cur := d.hiers[0].Mount
		for _, p := range parts[:len(parts)-1] {
			_ = os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0o644)
			cur = filepath.Join(cur, p)
		}
		_ = os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0o644)
	}
	return nil
}

// apply writes the resource limits of res into rel. Zero fields are left
// alone (CRI: 0 means "not specified").
func (d *cgroupDriver) apply(rel string, res *resources) error {
	if res == nil {
		return nil
	}
	if d.v2 {
		return d.applyV2(rel, res)
	}
	if cpu := d.dir("cpu", rel); cpu != "" {
		if res.CPUShares > 0 {
			if err := writeInt(cpu, "cpu.shares", res.CPUShares); err != nil {
				return err
			}
		}
		if res.CPUPeriod > 0 {
			if err := writeInt(cpu, "cpu.cfs_period_us", res.CPUPeriod); err != nil {
				return err
			}
		}
		if res.CPUQuota != 0 {
			if err := writeInt(cpu, "cpu.cfs_quota_us", res.CPUQuota); err != nil {
				return err
			}
		}
	}
	if mem := d.dir("memory", rel); mem != "" && res.MemoryLimit > 0 {
		if err := setMemoryV1(mem, res.MemoryLimit, res.MemorySwapLimit); err != nil {
			return err
		}
	}
	if pids := d.dir("pids", rel); pids != "" && res.PidsLimit > 0 {
		if err := writeInt(pids, "pids.max", res.PidsLimit); err != nil {
			return err
		}
	}
	return nil
}

// setMemoryV1 writes the memory limit and, when the kernel accounts swap,
// a memory+swap limit (equal to the memory limit unless one is given) so that
// the limit is not dodged by swapping. The two must stay ordered
// (memsw >= limit), so the write order depends on the direction of change.
func setMemoryV1(dir string, limit, swap int64) error {
	if swap <= 0 {
		swap = limit
	}
	memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
	if _, err := os.Stat(memsw); err != nil {
		return writeInt(dir, "memory.limit_in_bytes", limit)
	}
	if err := writeInt(dir, "memory.limit_in_bytes", limit); err != nil {
		// Raising: memsw has to go up first.
		if err2 := writeInt(dir, "memory.memsw.limit_in_bytes", swap); err2 != nil {
			return err
		}
		return writeInt(dir, "memory.limit_in_bytes", limit)
	}
	return writeInt(dir, "memory.memsw.limit_in_bytes", swap)
}

func (d *cgroupDriver) applyV2(rel string, res *resources) error {
	dir := filepath.Join(d.hiers[0].Mount, rel)
	if res.CPUShares > 0 {
		// The kubelet's shares→weight mapping: [2, 262144] onto [1, 10000].
		weight := 1 + ((res.CPUShares-2)*9999)/262142
		if err := writeInt(dir, "cpu.weight", weight); err != nil {
			return err
		}
	}
	if res.CPUQuota != 0 || res.CPUPeriod > 0 {
		quota := "max"
		if res.CPUQuota > 0 {
			quota = strconv.FormatInt(res.CPUQuota, 10)
		}
		period := res.CPUPeriod
		if period <= 0 {
			period = 100000
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(quota+" "+strconv.FormatInt(period, 10)), 0o644); err != nil {
			return fmt.Errorf("write %s/cpu.max: %w", dir, err)
		}
	}
	if res.MemoryLimit > 0 {
		if err := writeInt(dir, "memory.max", res.MemoryLimit); err != nil {
			return err
		}
		_ = writeInt(dir, "memory.swap.max", 0)
	}
	if res.PidsLimit > 0 {
		if err := writeInt(dir, "pids.max", res.PidsLimit); err != nil {
			return err
		}
	}
	return nil
}

// procsFiles lists the cgroup.procs files a process writes its pid into to
// join the container cgroup.
func (d *cgroupDriver) procsFiles(rel string) []string {
	var out []string
	for _, dir := range d.dirs(rel) {
		out = append(out, filepath.Join(dir, "cgroup.procs"))
	}
	return out
}

// pids returns the processes currently in rel (any hierarchy).
func (d *cgroupDriver) pids(rel string) []int {
	seen := map[int]bool{}
	var out []int
	for _, f := range d.procsFiles(rel) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(l); err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// killAll sends SIGKILL to every process in rel.
func (d *cgroupDriver) killAll(rel string) {
	for _, p := range d.pids(rel) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// remove kills what is left in rel and deletes it from every hierarchy,
// retrying while the kernel still holds the dying processes.
func (d *cgroupDriver) remove(rel string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		d.killAll(rel)
		var lastErr error
		for _, dir := range d.dirs(rel) {
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
				lastErr = fmt.Errorf("remove cgroup %s: %w", dir, err)
			}
		}
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return lastErr
		}
		time.Sleep(20 * time.Millisecond) // the kernel is still tearing processes down
	}
}

// cgroupStats is what ContainerStats reports from a container cgroup.
type cgroupStats struct {
	cpuNanos   uint64
	memUsage   uint64
	workingSet uint64
	rss        uint64
}

func (d *cgroupDriver) stats(rel string) (cgroupStats, error) {
	var s cgroupStats
	if d.v2 {
		dir := filepath.Join(d.hiers[0].Mount, rel)
		usec, ok := readKeyed(filepath.Join(dir, "cpu.stat"), "usage_usec")
		if !ok {
			return s, fmt.Errorf("read %s/cpu.stat", dir)
		}
		s.cpuNanos = uint64(usec) * 1000
		s.memUsage = readUint(filepath.Join(dir, "memory.current"))
		inactive, _ := readKeyed(filepath.Join(dir, "memory.stat"), "inactive_file")
		s.workingSet = sub(s.memUsage, uint64(inactive))
		anon, _ := readKeyed(filepath.Join(dir, "memory.stat"), "anon")
		s.rss = uint64(anon)
		return s, nil
	}
	if dir := d.dir("cpuacct", rel); dir != "" {
		data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return s, err
		}
		s.cpuNanos, _ = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	}
	if dir := d.dir("memory", rel); dir != "" {
		s.memUsage = readUint(filepath.Join(dir, "memory.usage_in_bytes"))
		inactive, _ := readKeyed(filepath.Join(dir, "memory.stat"), "total_inactive_file")
		s.workingSet = sub(s.memUsage, uint64(inactive))
		rss, _ := readKeyed(filepath.Join(dir, "memory.stat"), "total_rss")
		s.rss = uint64(rss)
	}
	return s, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func writeInt(dir, file string, v int64) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
		return fmt.Errorf("write %s/%s=%d: %w", dir, file, v, err)
	}
	return nil
}

func readUint(path string) uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v
}

// readKeyed reads "key value" lines (memory.stat, cpu.stat, oom_control).
func readKeyed(path, key string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
