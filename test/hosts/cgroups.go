package hosts

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// cgroupParent is the cgroup, in every hierarchy, under which nodes live.
const cgroupParent = "minilet-hosts"

// cgroupRoot is where the host mounts its hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// nodeCgroups is one node's cgroup in every hierarchy the host mounts.
// nspawn is launched from it: nspawn makes its payload/ and supervisor/
// cgroups next to the one it starts in, and the container's cgroup
// namespace is rooted there, so without it they would land at the root of
// the host's hierarchies.
type nodeCgroups struct {
	dirs []string // one per hierarchy: /sys/fs/cgroup/<ctrl>/minilet-hosts/<name>
}

// hierarchies lists the mount points of the host's cgroup hierarchies
// (v1 controllers, the named systemd one and a v2 one, whichever exist).
func hierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: id parent major:minor root mountpoint opts ... - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := indexOf(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		fstype, mnt := fields[sep+1], fields[4]
		if (fstype == "cgroup" || fstype == "cgroup2") && (mnt == cgroupRoot || strings.HasPrefix(mnt, cgroupRoot+"/")) {
			out = append(out, mnt)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("listing cgroup hierarchies: none mounted under " + cgroupRoot)
	}
	return out, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// newNodeCgroups makes the node's cgroup in every hierarchy.
func newNodeCgroups(name string) (*nodeCgroups, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	cg := &nodeCgroups{}
	for _, h := range hs {
		dir := filepath.Join(h, cgroupParent, name)
		if err := mkNodeCgroup(dir); err != nil {
			_ = cg.remove()
			return nil, err
		}
		cg.dirs = append(cg.dirs, dir)
	}
	return cg, nil
}

// mkNodeCgroup makes minilet-hosts/ (if need be) and the node's cgroup in
// it. Another test process removes minilet-hosts/ when its last node goes,
// which may fall between the two: then it starts over.
func mkNodeCgroup(dir string) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = mkCgroup(filepath.Dir(dir)); err != nil {
			continue
		}
		if err = mkCgroup(dir); err == nil {
			return nil
		}
	}
	return err
}

// mkCgroup makes a cgroup; a new cpuset cgroup starts with no CPUs and no
// memory nodes, and refuses tasks until it gets its parent's.
func mkCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("making cgroup %s: %w", dir, err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		mine := filepath.Join(dir, f)
		cur, err := os.ReadFile(mine)
		if err != nil || strings.TrimSpace(string(cur)) != "" {
			continue // not a cpuset hierarchy, or already set
		}
		v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			return fmt.Errorf("making cgroup %s: reading the parent's %s: %w", dir, f, err)
		}
		if err := os.WriteFile(mine, v, 0o644); err != nil {
			return fmt.Errorf("making cgroup %s: %s: %w", dir, f, err)
		}
	}
	return nil
}

// procFiles are the cgroup.procs files a process writes its PID to, to
// join the node's cgroups.
func (c *nodeCgroups) procFiles() []string {
	out := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// pids lists every process in the node's cgroups (in any hierarchy, and
// below: systemd inside makes its own tree).
func (c *nodeCgroups) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range c.dirs {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// kill sends SIGKILL to every process in the node's cgroups: the last
// resort when a node does not power off.
func (c *nodeCgroups) kill() {
	for _, pid := range c.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// clean removes the cgroups systemd inside the node left below the node's
// own (a powered-off systemd does not remove them all), keeping the node's.
func (c *nodeCgroups) clean() error {
	var errs []error
	for _, d := range c.dirs {
		errs = append(errs, rmdirBelow(d, false))
	}
	return errors.Join(errs...)
}

// remove removes the node's cgroups, and minilet-hosts when no other node
// uses it.
func (c *nodeCgroups) remove() error {
	var errs []error
	for _, d := range c.dirs {
		errs = append(errs, rmdirBelow(d, true))
		_ = os.Remove(filepath.Dir(d)) // busy while another node lives
	}
	return errors.Join(errs...)
}

// rmdirBelow removes the cgroups below dir, deepest first (a cgroup is
// removed with rmdir, its control files go with it), and dir itself when
// self is set.
func rmdirBelow(dir string, self bool) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (self || path != dir) {
			dirs = append(dirs, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
