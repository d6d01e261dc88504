package monitorproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The container init's mount-side confinement, after the container's
// filesystems are in place and before it drops privileges: sysctls, the
// masked and read-only paths (procMount Default), and for a host-image
// container a read-only /sys and, with readOnlyRootFilesystem, a read-only
// view of the host's tree. Everything happens in the container's own mount
// namespace, whose mounts are slaves or private: nothing here reaches the
// host's mounts.

// confineMounts applies sec's sysctls, masked and read-only paths; for a
// host-image container (host true) also a read-only /sys and root. mounts
// are the container's volumes, which keep their own read-only setting.
func confineMounts(sec *Security, host bool, mounts []BindMount) error {
	if err := applySysctls(sec.Sysctls, sec.HostNamespaces); err != nil {
		return err
	}
	if host && !sec.Privileged {
		if err := remountReadOnly("/sys"); err != nil {
			return fmt.Errorf("/sys: %w", err)
		}
	}
	if host && sec.ReadOnlyRoot {
		if err := readOnlyHostRoot(mounts); err != nil {
			return fmt.Errorf("readOnlyRootFilesystem: %w", err)
		}
	}
	for _, p := range sec.MaskedPaths {
		if err := maskPath(p); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for _, p := range sec.ReadonlyPaths {
		if err := readOnlyPath(p); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// maskPath hides p: a directory under an empty read-only tmpfs, anything
// else under /dev/null.
func maskPath(p string) error {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
	}
	return unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
}

// readOnlyPath binds p onto itself and makes it (and what is below it)
// read-only.
func readOnlyPath(p string) error {
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return remountReadOnly(p)
}

// readOnlyHostRoot makes every mount of the host's tree read-only in the
// container's mount namespace, except the container's volumes (at or below
// their targets: they keep their own setting) and the kernel filesystems a
// container writes to (/dev and /proc; /proc/sys is among the read-only
// paths). It checks that / ended read-only.
func readOnlyHostRoot(mounts []BindMount) error {
	var keep []string
	for _, m := range mounts {
		p, err := secureJoin("/", m.Target)
		if err != nil {
			return err
		}
		keep = append(keep, p)
	}
	keep = append(keep, "/dev", "/proc")
	points, err := mountPoints()
	if err != nil {
		return err
	}
	for _, p := range points {
		if under(p, keep) {
			continue
		}
		if err := setMountReadOnly(p); err != nil {
			// A mount point hidden by a later mount cannot be reached and
			// needs nothing.
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return err
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return errors.New("/ is still writable")
	}
	return nil
}

func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// setMountReadOnly makes the mount at p read-only, not the ones below it.
func setMountReadOnly(p string) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	err := unix.MountSetattr(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, &attr)
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return err
	}
	keepFlags := uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC)
	return unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keepFlags, "")
}

// mountPoints lists the mount points of the calling process's mount
// namespace, parents before children.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeMountinfo(f[4]))
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sysctlNamespace is the namespace a sysctl belongs to, or "" when it is
// not namespaced (it would change the whole host).
func sysctlNamespace(key string) string {
	switch {
	case strings.HasPrefix(key, "net."):
		return "net"
	case key == "kernel.shm_rmid_forced", key == "kernel.shmmax", key == "kernel.shmall", key == "kernel.shmmni",
		strings.HasPrefix(key, "kernel.msg"), key == "kernel.sem", strings.HasPrefix(key, "fs.mqueue."):
		return "ipc"
	case key == "kernel.hostname", key == "kernel.domainname":
		return "uts"
	}
	return ""
}

// applySysctls writes each sysctl in the container's namespaces, refusing
// any that is not namespaced or whose namespace the container shares with
// the host (hostNS: the agent's namespace inodes).
func applySysctls(sysctls map[string]string, hostNS map[string]uint64) error {
	for key, value := range sysctls {
		ns := sysctlNamespace(key)
		if ns == "" {
			return fmt.Errorf("sysctl %s is not namespaced: setting it would change the host", key)
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/ns/"+ns, &st); err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
		if host, ok := hostNS[ns]; !ok || host == st.Ino {
			return fmt.Errorf("sysctl %s: the container is in the host's %s namespace, setting it would change the host", key, ns)
		}
		rel := key
		if !strings.Contains(key, "/") {
			rel = strings.ReplaceAll(key, ".", "/")
		}
		p := filepath.Join("/proc/sys", rel)
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
		}
	}
	return nil
}
