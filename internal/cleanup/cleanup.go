// Package cleanup removes from the host what one minilet created there,
// once that agent is stopped for good: `minilet cleanup` with the flags it
// ran with. It leaves the host as the agent found it: no pods, cgroups,
// root dir, lock files, default CNI network, IP leases, bridge or host-port
// chains of this agent, while everything another agent or runtime still
// uses stays (and is reported as left, with the reason).
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/hostlock"
)

// Config is what the agent ran with (the same flags and file as `run`).
type Config struct {
	// RootDir is the agent's --root-dir. Required.
	RootDir string
	// RootLock is the root dir's lock file name (the agent's). Required.
	RootLock string
	// CgroupRoot is --cgroup-root (a cgroupfs path such as /minilet).
	CgroupRoot string
	// CgroupDriver is cgroupfs or systemd: how pod cgroups were named.
	CgroupDriver string
	// CgroupMountRoot is where cgroup filesystems are mounted. Default
	// /sys/fs/cgroup.
	CgroupMountRoot string
	// CgroupLockDir holds the cgroup roots' lock files (cm.DefaultLockDir).
	CgroupLockDir string
	// DevicePluginDir is --device-plugin-dir.
	DevicePluginDir string
	// CNIConfDir, CNIBinDirs and CNICacheDir are the pod network's flags.
	CNIConfDir  string
	CNIBinDirs  []string
	CNICacheDir string
	// ContainerRuntimeEndpoint is empty for the embedded runtime.
	ContainerRuntimeEndpoint string
	// StopPods stops and removes the pods still running, instead of
	// refusing to clean up under them.
	StopPods bool
	Logger   *slog.Logger
}

// Report is what a cleanup did and what it left, and why.
type Report struct {
	Removed []string
	Left    []string // each with its reason
}

func (r *Report) removed(format string, a ...any) {
	r.Removed = append(r.Removed, fmt.Sprintf(format, a...))
}
func (r *Report) left(format string, a ...any) { r.Left = append(r.Left, fmt.Sprintf(format, a...)) }

// Print writes the report for a person.
func (r *Report) Print(w io.Writer) {
	for _, s := range r.Removed {
		_, _ = fmt.Fprintln(w, "removed:", s)
	}
	for _, s := range r.Left {
		_, _ = fmt.Fprintln(w, "left:   ", s)
	}
	if len(r.Removed) == 0 && len(r.Left) == 0 {
		_, _ = fmt.Fprintln(w, "nothing to clean up")
	}
}

// Run cleans up after the agent of cfg.RootDir. It refuses (errdefs
// ErrConflict) while an agent runs on the root dir, and while pods still
// run unless cfg.StopPods. It holds the root dir's lock throughout, so no
// agent starts there meanwhile.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.RootDir == "" || cfg.RootLock == "" {
		return nil, errdefs.Classify(errors.New("cleanup: fields RootDir and RootLock are required"), errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.CgroupMountRoot == "" {
		cfg.CgroupMountRoot = "/sys/fs/cgroup"
	}
	rep := &Report{}
	rootFound := exists(cfg.RootDir)
	if rootFound {
		lock, err := hostlock.TryLock(filepath.Join(cfg.RootDir, cfg.RootLock))
		var held *hostlock.HeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("--root-dir %s: an agent is running there (%w): stop it first", cfg.RootDir, err)
		}
		if err != nil {
			return nil, fmt.Errorf("--root-dir %s: %w", cfg.RootDir, err)
		}
		defer lock.Release()
		if err := removePods(ctx, cfg, rep); err != nil {
			return rep, err
		}
	}
	// Pods first (their network teardown needs the runtime's state), then
	// their cgroups, then what they shared.
	if err := removeCgroups(cfg, rep); err != nil {
		return rep, err
	}
	removeDevicePluginFiles(cfg, rep)
	removeNetwork(cfg, rep)
	if rootFound {
		if err := removeRootDir(cfg.RootDir); err != nil {
			return rep, err
		}
		rep.removed("root dir %s (state, keys, images, volumes)", cfg.RootDir)
	}
	return rep, nil
}

// removeRootDir detaches the mounts below dir (tmpfs volumes of pods that
// were not unmounted), deepest first, then removes it.
func removeRootDir(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("--root-dir %s: reading mounts: %w", dir, err)
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("--root-dir %s: unmount %s: %w", dir, p, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("--root-dir %s: %w", dir, err)
	}
	return nil
}

// removeEmptyDirs removes dir and then its parents while they are empty,
// stopping at stop (never removed) or at the first directory in use.
func removeEmptyDirs(dir, stop string) {
	for dir != stop && dir != "/" && dir != "." {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
