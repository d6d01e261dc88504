package monitorproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

	"golang.org/x/sys/unix"
)

// The container init: the monitor starts it (a re-exec of the monitor's
// own binary, the agent or cmd/minilet-monitor) in a new mount namespace
// and, for a container from an image, a new PID namespace (unless hostPID);
// it first enters the pod's network, UTS and IPC namespaces. For a
// container from an image it then mounts the root filesystem, /proc, /dev
// and /sys, pivots into it, takes the container's user and execs the
// container's command, which thus runs as PID 1. For a host-image
// container it binds the mounts onto the host's tree and execs the command
// as it is. Failures before the exec are written to fd 3; a successful
// exec closes it empty.
const (
	initEnv  = "MINILET_EMBEDDED_INIT" // path of the monitor spec
	initArg0 = "minilet-init"
)

// cloneFlags are the namespaces the init is started in: a new mount
// namespace, and a new PID namespace for a container from an image unless
// its pod shares one (or the host's). Network, UTS and IPC namespaces are
// the pod's, joined by the init, or the host's, as with other runtimes.
func cloneFlags(spec *Spec) uintptr {
	flags := uintptr(syscall.CLONE_NEWNS)
	if spec.Rootfs != nil && !spec.Pod.HostPID && spec.Pod.Join["pid"] == "" {
		flags |= syscall.CLONE_NEWPID
	}
	return flags
}

// devices bound from the host into a container's /dev.
var initDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func runInit() int {
	// The bounding set is per thread: the one dropping capabilities must be
	// the one that execs.
	runtime.LockOSThread()
	report := os.NewFile(3, "report")
	syscall.CloseOnExec(3)
	fail := func(err error) int {
		_, _ = report.WriteString(err.Error())
		return 127
	}
	var spec Spec
	if err := statefile.Read(os.Getenv(initEnv), &spec); err != nil {
		return fail(err)
	}
	if err := joinPodNamespaces(spec.Pod.Join); err != nil {
		return fail(err)
	}
	switch {
	case len(spec.Args) == 0:
		return fail(errors.New("init: no command"))
	case spec.Rootfs == nil:
		return fail(execOnHost(&spec))
	}
	sec := spec.Security
	if sec == nil {
		sec = &Security{Privileged: true}
	}
	if err := setupRootfs(&spec, sec.ReadOnlyRoot); err != nil {
		return fail(err)
	}
	if err := confineMounts(sec, false, nil); err != nil {
		return fail(err)
	}
	cred, home, err := resolveUser(sec.User)
	if err != nil {
		return fail(err)
	}
	env := spec.Env
	if !hasEnv(env, "HOME") {
		env = append(env, "HOME="+home)
	}
	if err := os.Chdir(spec.WorkingDir); err != nil {
		return fail(fmt.Errorf("working directory %s: %w", spec.WorkingDir, err))
	}
	path, err := LookPath(spec.Args[0], env)
	if err != nil {
		return fail(err)
	}
	if err := dropPrivileges(sec, cred); err != nil {
		return fail(err)
	}
	return fail(syscall.Exec(path, spec.Args, env))
}

// execOnHost runs a host-image container's command in the mount namespace
// the init was started in, once the container's mounts are there and its
// security context applied (user from the host's /etc/passwd): it changes
// directory and resolves the command afterwards, so that both may lie in a
// volume. It returns only on failure.
func execOnHost(spec *Spec) error {
	if err := setupHostMounts(spec.Mounts); err != nil {
		return err
	}
	if err := dropHeldNamespaces(spec.Pod.HeldUnder); err != nil {
		return err
	}
	env := spec.Env
	var cred *syscall.Credential
	if sec := spec.Security; sec != nil {
		if err := confineMounts(sec, true, spec.Mounts); err != nil {
			return err
		}
		c, home, err := resolveUser(sec.User)
		if err != nil {
			return err
		}
		cred = c
		if !hasEnv(env, "HOME") {
			env = append(env, "HOME="+home)
		}
	}
	if err := os.Chdir(spec.WorkingDir); err != nil {
		return fmt.Errorf("working directory %s: %w", spec.WorkingDir, err)
	}
	path, err := LookPath(spec.Args[0], env)
	if err != nil {
		return err
	}
	if cred != nil {
		if err := dropPrivileges(spec.Security, cred); err != nil {
			return err
		}
	}
	return syscall.Exec(path, spec.Args, env)
}

// setupRootfs mounts the container's filesystems, creates the working
// directory, and pivots into them.
func setupRootfs(spec *Spec, readOnly bool) error {
	rs, workDir := spec.Rootfs, spec.WorkingDir
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	m := rs.Merged
	if rs.Copy {
		if err := unix.Mount(m, m, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind root filesystem: %w", err)
		}
		if err := unix.Mount("", m, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("remount root filesystem nodev: %w", err)
		}
	} else {
		if err := mountOverlay(rs); err != nil {
			return err
		}
	}
	type mnt struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}
	const secure = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, x := range []mnt{
		{"proc", "/proc", "proc", secure, ""},
		{"tmpfs", "/dev", "tmpfs", unix.MS_NOSUID | unix.MS_STRICTATIME, "mode=755,size=65536k"},
	} {
		if err := mountIn(m, x.target, true, func(p string) error { return unix.Mount(x.src, p, x.fstype, x.flags, x.data) }); err != nil {
			return err
		}
	}
	if err := populateDev(m); err != nil {
		return err
	}
	if err := mountIn(m, "/sys", true, func(p string) error {
		if err := unix.Mount("sysfs", p, "sysfs", secure|unix.MS_RDONLY, ""); err == nil {
			return nil
		}
		if err := unix.Mount("/sys", p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		return unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, "")
	}); err != nil {
		return err
	}
	if err := mountCgroups(m, spec.CgroupDirs, spec.CgroupV2); err != nil {
		return fmt.Errorf("mount the container's cgroups: %w", err)
	}
	mounts := rs.Mounts
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if !hasMountTarget(mounts, f) && fileExists(f) {
			mounts = append(mounts, BindMount{Source: f, Target: f, ReadOnly: true})
		}
	}
	if err := bindMounts(m, mounts); err != nil {
		return err
	}
	if wd, err := secureJoin(m, workDir); err != nil || os.MkdirAll(wd, 0o755) != nil {
		return fmt.Errorf("working directory %s: cannot create it", workDir)
	}
	if readOnly {
		if err := unix.Mount("", m, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("make the root filesystem read-only: %w", err)
		}
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching it
	// leaves the container's root alone.
	if err := unix.Chdir(m); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// mountOverlay mounts the image layers under the writable layer. Lower dirs
// are given relative to their common parent (the store's layer dir) so that
// deep images fit in the one-page mount option limit.
func mountOverlay(rs *RootfsSpec) error {
	if len(rs.Lower) == 0 {
		return errors.New("image has no layers")
	}
	parent := filepath.Dir(rs.Lower[0])
	rel := make([]string, len(rs.Lower))
	for i, l := range rs.Lower {
		if filepath.Dir(l) != parent {
			parent = ""
			break
		}
		rel[i] = filepath.Base(l)
	}
	lower := strings.Join(rs.Lower, ":")
	if parent != "" {
		if err := unix.Chdir(parent); err != nil {
			return err
		}
		lower = strings.Join(rel, ":")
	}
	opts := "lowerdir=" + lower + ",upperdir=" + rs.Upper + ",workdir=" + rs.Work
	// nodev: device nodes an image carries are not usable; /dev is ours.
	if err := unix.Mount("overlay", rs.Merged, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount overlay root filesystem: %w", err)
	}
	return nil
}

func populateDev(root string) error {
	dev := filepath.Join(root, "dev")
	for _, d := range initDevices {
		host := "/dev/" + d
		if _, err := os.Stat(host); err != nil {
			continue
		}
		p := filepath.Join(dev, d)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount(host, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", host, err)
		}
	}
	for _, d := range []string{"pts", "shm", "mqueue"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	_ = unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k")
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err == nil {
		_ = os.Symlink("pts/ptmx", filepath.Join(dev, "ptmx"))
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

func hasMountTarget(ms []BindMount, target string) bool {
	for _, m := range ms {
		if filepath.Clean(m.Target) == target {
			return true
		}
	}
	return false
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// resolveUser turns a UserSpec into credentials using the container's own
// /etc/passwd and /etc/group (called after pivoting), and returns the home
// directory.
func resolveUser(u UserSpec) (*syscall.Credential, string, error) {
	uid, gid, home := int64(0), int64(0), "/root"
	name := u.Name
	switch {
	case u.UID != nil:
		uid = *u.UID
		if e, ok := lookupPasswd(func(f []string) bool { return f[2] == strconv.FormatInt(uid, 10) }); ok {
			gid, home, name = e.gid, e.home, e.name
		} else {
			home = "/"
		}
	case u.Name != "":
		e, ok := lookupPasswd(func(f []string) bool { return f[0] == u.Name })
		if !ok {
			return nil, "", fmt.Errorf("user %q not found in the image's /etc/passwd", u.Name)
		}
		uid, gid, home = e.uid, e.gid, e.home
	}
	switch {
	case u.GID != nil:
		gid = *u.GID
	case u.Group != "":
		g, ok := lookupGroup(u.Group)
		if !ok {
			return nil, "", fmt.Errorf("group %q not found in the image's /etc/group", u.Group)
		}
		gid = g
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if name != "" {
		cred.Groups = append(cred.Groups, memberGroups(name)...)
	}
	for _, g := range u.Groups {
		cred.Groups = append(cred.Groups, uint32(g))
	}
	return cred, home, nil
}

func setCredential(c *syscall.Credential) error {
	groups := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(c.Gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", c.Gid, err)
	}
	if err := syscall.Setuid(int(c.Uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", c.Uid, err)
	}
	return nil
}

type passwdEntry struct {
	name     string
	uid, gid int64
	home     string
}

func lookupPasswd(match func([]string) bool) (passwdEntry, bool) {
	var out passwdEntry
	found := false
	scanColonFile("/etc/passwd", func(f []string) bool {
		if len(f) < 6 || !match(f) {
			return true
		}
		uid, err1 := strconv.ParseInt(f[2], 10, 64)
		gid, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return true
		}
		out, found = passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5]}, true
		return false
	})
	return out, found
}

func lookupGroup(name string) (int64, bool) {
	var gid int64
	found := false
	scanColonFile("/etc/group", func(f []string) bool {
		if len(f) >= 3 && f[0] == name {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				gid, found = n, true
				return false
			}
		}
		return true
	})
	return gid, found
}

// memberGroups are the groups /etc/group lists user as a member of.
func memberGroups(user string) []uint32 {
	var out []uint32
	scanColonFile("/etc/group", func(f []string) bool {
		if len(f) >= 4 {
			for _, m := range strings.Split(f[3], ",") {
				if m == user {
					if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
						out = append(out, uint32(n))
					}
				}
			}
		}
		return true
	})
	return out
}

func scanColonFile(path string, each func([]string) bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !each(strings.Split(line, ":")) {
			return
		}
	}
}

// limitBoundingSet drops every capability outside mask from the calling
// thread's bounding set, which caps what a program it execs (or a child it
// forks) can ever hold. The caller must have locked its OS thread.
func limitBoundingSet(mask uint64) error {
	last := lastCap()
	for c := uint(0); c <= last; c++ {
		if mask&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return nil
}

func lastCap() uint {
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 8); err == nil && n < 64 {
			return uint(n)
		}
	}
	return 40
}
