package monitorproc

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// mountCgroups gives a container from an image its own cgroups at
// /sys/fs/cgroup, read-only, as runc does: on cgroup v1 a tmpfs holding,
// for each hierarchy the container is in, its own cgroup directory under
// the hierarchy's name (cpu,cpuacct, memory, ...) and the host's aliases
// of it (cpu → cpu,cpuacct); on v2 its own cgroup as the whole tree. A
// program in the container reads its limits where it expects them
// (/sys/fs/cgroup/memory/memory.limit_in_bytes) and sees no other
// container's.
func mountCgroups(root string, dirs []CgroupDir, v2 bool) error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	bind := func(src string) func(string) error {
		return func(p string) error {
			if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
				return err
			}
			return unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, "")
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	if v2 {
		return mountIn(root, "/sys/fs/cgroup", true, bind(dirs[0].Dir))
	}
	if err := mountIn(root, "/sys/fs/cgroup", true, func(p string) error {
		return unix.Mount("tmpfs", p, "tmpfs", flags, "mode=755")
	}); err != nil {
		return err
	}
	mounted := map[string]bool{}
	hostRoot := ""
	for _, d := range dirs {
		name := filepath.Base(d.Root)
		if mounted[name] {
			continue
		}
		if err := mountIn(root, "/sys/fs/cgroup/"+name, true, bind(d.Dir)); err != nil {
			return err
		}
		mounted[name] = true
		hostRoot = filepath.Dir(d.Root)
	}
	// The host's aliases of comounted hierarchies (cpu → cpu,cpuacct).
	if entries, err := os.ReadDir(hostRoot); err == nil {
		for _, e := range entries {
			if e.Type()&os.ModeSymlink == 0 {
				continue
			}
			target, err := os.Readlink(filepath.Join(hostRoot, e.Name()))
			if err != nil || !mounted[target] {
				continue
			}
			p, err := secureJoin(root, "/sys/fs/cgroup/"+e.Name())
			if err != nil {
				return fmt.Errorf("cgroup alias %s: %w", e.Name(), err)
			}
			if err := os.Symlink(target, p); err != nil && !os.IsExist(err) {
				return fmt.Errorf("cgroup alias %s: %w", e.Name(), err)
			}
		}
	}
	p, err := secureJoin(root, "/sys/fs/cgroup")
	if err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, "")
}
