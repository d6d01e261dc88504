package cleanup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cm/systemd"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/hostlock"
)

// legacyMonitorCgroup is where monitors ran before they moved below the
// cgroup root.
const legacyMonitorCgroup = "/minilet-monitors"

// removeCgroups removes the cgroups the agent made below its cgroup root,
// in every hierarchy (the v1 controllers, systemd's named one and the
// unified one, or the v2 tree): kubepods with its QoS tiers and pods, the
// monitors' cgroup, and the root itself when nothing else is left in it
// (a kubelet-style root "/" is never removed). Processes still in them
// refuse the cleanup. Then the cgroup root's lock file goes.
func removeCgroups(cfg Config, rep *Report) error {
	root, err := cgroups.ParseCgroupfs(cfg.CgroupRoot)
	if err != nil {
		return fmt.Errorf("--cgroup-root %q: %w", cfg.CgroupRoot, err)
	}
	naming := cgroups.NamingCgroupfs
	if cfg.CgroupDriver == string(cgroups.NamingSystemd) {
		naming = cgroups.NamingSystemd
	}
	// kubepods is named by the cgroup driver; monitors always by cgroupfs.
	targets := []string{
		naming.Path(root.Child("kubepods")),
		cgroups.NamingCgroupfs.Path(root.Child(supervisor.MonitorCgroupName)),
	}
	var rootPaths []string
	if len(root) > 0 {
		rootPaths = uniq(naming.Path(root), cgroups.NamingCgroupfs.Path(root))
	}
	mounts := hierarchies(cfg.CgroupMountRoot)
	for _, m := range mounts {
		for _, t := range targets {
			if err := busy(filepath.Join(m, t)); err != nil {
				return err
			}
		}
	}
	if naming == cgroups.NamingSystemd {
		stopSlices(cfg, root, rep)
	}
	var removed []string
	for _, m := range mounts {
		for _, t := range targets {
			n, err := removeTree(filepath.Join(m, t))
			if err != nil {
				rep.left("cgroup %s: %v", filepath.Join(m, t), err)
			}
			if n > 0 {
				removed = append(removed, t)
			}
		}
		// The root alone: what else is in it is not the agent's.
		for _, r := range rootPaths {
			dir := filepath.Join(m, r)
			switch err := os.Remove(dir); {
			case err == nil:
				removed = append(removed, r)
			case errors.Is(err, fs.ErrNotExist):
			default:
				rep.left("cgroup root %s: %v (it holds cgroups that are not this agent's)", dir, err)
			}
		}
	}
	// Earlier versions put every agent's monitors in one cgroup at the top;
	// once empty it is nobody's.
	for _, m := range mounts {
		if os.Remove(filepath.Join(m, legacyMonitorCgroup)) == nil {
			removed = append(removed, legacyMonitorCgroup)
		}
	}
	if len(removed) > 0 {
		rep.removed("cgroups %s in every hierarchy under %s", joinPaths(removed), cfg.CgroupMountRoot)
	}
	if cfg.CgroupLockDir != "" {
		for _, p := range uniq(naming.Path(root), cgroups.NamingCgroupfs.Path(root)) {
			lock := cm.LockFile(cfg.CgroupLockDir, p)
			if !exists(lock) {
				continue
			}
			if err := hostlock.Remove(lock); err != nil {
				rep.left("cgroup root lock %s: %v", lock, err)
				continue
			}
			rep.removed("cgroup root lock %s", lock)
		}
		removeEmptyDirs(cfg.CgroupLockDir, "/run")
	}
	return nil
}

// hierarchies lists the cgroup hierarchies mounted under mountRoot: the
// root itself on cgroup v2, else each directory holding a cgroup.procs.
func hierarchies(mountRoot string) []string {
	if exists(filepath.Join(mountRoot, "cgroup.procs")) {
		return []string{mountRoot}
	}
	entries, err := os.ReadDir(mountRoot)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(mountRoot, e.Name())
		// Symlinks such as cpu -> cpu,cpuacct name a hierarchy twice.
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 && exists(filepath.Join(dir, "cgroup.procs")) {
			out = append(out, dir)
		}
	}
	return out
}

// busy fails when a process is still in dir or a cgroup below it.
func busy(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		procs, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil && len(bytes.TrimSpace(procs)) > 0 {
			return errdefs.Classify(fmt.Errorf("processes still run in cgroup %s (pods of a runtime that is not this agent's embedded one, or of a running agent): "+
				"stop them first", p), errdefs.ErrConflict)
		}
		return nil
	})
}

// removeTree removes the cgroup dir and the cgroups below it, deepest
// first, and returns how many it removed. A cgroup that still has other
// children (not the agent's) stays.
func removeTree(dir string) (int, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

func uniq(s ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func joinPaths(ps []string) string {
	ps = uniq(ps...)
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}

// stopSlices stops the systemd slices of cgroupDriver systemd (kubepods'
// and the root's), so that systemd forgets them before their directories
// go.
func stopSlices(cfg Config, root cgroups.Name, rep *Report) {
	files, err := cgroups.New(cgroups.Config{MountRoot: cfg.CgroupMountRoot, Naming: cgroups.NamingSystemd})
	if err != nil {
		rep.left("systemd slices: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := systemd.Connect(ctx, files)
	if err != nil {
		rep.left("systemd slices below %s: %v", cfg.CgroupRoot, err)
		return
	}
	for _, n := range []cgroups.Name{root.Child("kubepods"), root} {
		if len(n) == 0 {
			continue
		}
		if err := d.StopSlice(ctx, n); err != nil {
			rep.left("systemd slice %s: %v", d.Unit(n), err)
			continue
		}
		rep.removed("systemd slice %s", d.Unit(n))
	}
}
