package monitorproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The mount code both kinds of container share: CRI mounts bound into a
// root filesystem (containers from images, root = the merged rootfs before
// pivoting) or onto the host's own tree (host-image containers, root "/",
// in a mount namespace of their own).

// setupHostMounts gives a host-image container its CRI mounts. It runs in
// the new mount namespace the container was started in, which starts as a
// copy of the host's: every mount in it is first made a slave, so that
// mounts made on the host later still show up here while the ones made here
// never reach the host.
func setupHostMounts(mounts []BindMount) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the container's mounts slaves of the host's: %w", err)
	}
	return bindMounts("/", mounts)
}

// bindMounts binds each mount's source at its target inside root, in
// order, so that a later mount may sit inside an earlier one.
func bindMounts(root string, mounts []BindMount) error {
	for _, b := range mounts {
		st, err := os.Stat(b.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", b.Source, err)
		}
		if err := mountIn(root, b.Target, st.IsDir(), func(p string) error { return bindMount(b, p) }); err != nil {
			return err
		}
	}
	return nil
}

// bindMount binds b.Source (with the mounts below it) at p, sets its
// propagation and, for a read-only mount, remounts it read-only.
func bindMount(b BindMount, p string) error {
	if err := unix.Mount(b.Source, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	// A bind of a slave mount is a slave of the same master; a private
	// mount cuts that link, so the host's later mounts under the source
	// stay out.
	prop := uintptr(unix.MS_PRIVATE)
	if b.HostToContainer {
		prop = unix.MS_SLAVE
	}
	if err := unix.Mount("", p, "", prop|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("set propagation: %w", err)
	}
	if b.ReadOnly {
		return remountReadOnly(p)
	}
	return nil
}

// remountReadOnly makes the mount at p read-only together with the mounts
// below it (mount_setattr, Linux 5.12). Older kernels get a remount of p
// alone, which keeps its nosuid, nodev and noexec; mounts below it stay as
// they are there.
func remountReadOnly(p string) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	err := unix.MountSetattr(unix.AT_FDCWD, p, unix.AT_RECURSIVE, &attr)
	if !errors.Is(err, unix.ENOSYS) {
		if err != nil {
			return fmt.Errorf("make read-only: %w", err)
		}
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return fmt.Errorf("make read-only: %w", err)
	}
	keep := uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC) // same bits as MS_*
	if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("make read-only: %w", err)
	}
	return nil
}

// mountIn creates target inside root when it is missing (a directory, or
// an empty file when dir is false), resolving symlinks as the container
// would see them, and calls mount on the resulting host path. An existing
// target is never touched. With root "/" (host-image containers) a missing
// target is created on the host's filesystem as the mount point, and stays
// there after the container is gone.
func mountIn(root, target string, dir bool, mount func(string) error) error {
	p, err := secureJoin(root, target)
	if err != nil {
		return fmt.Errorf("mount target %s: %w", target, err)
	}
	if dir {
		err = os.MkdirAll(p, 0o755)
	} else if _, serr := os.Lstat(p); errors.Is(serr, os.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(p, nil, 0o644)
		}
	}
	if err != nil {
		return fmt.Errorf("mount target %s: %w", target, err)
	}
	if err := mount(p); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	return nil
}

// secureJoin resolves path inside root as if root were "/": symlinks,
// absolute or relative, never lead outside root. Missing components are
// joined as they are.
func secureJoin(root, path string) (string, error) {
	var resolved string // relative to root, always clean
	rest := strings.Split(filepath.Clean("/"+path), "/")
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			resolved = filepath.Dir("/" + resolved)[1:]
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > 40 {
			return "", errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = ""
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(root, resolved), nil
}
