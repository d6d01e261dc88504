package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// EmptyDirUsage is the disk space pod's emptyDir volume named volume
// takes, counted as du counts it: allocated blocks, a file with several
// links once, nothing on other filesystems mounted below it. A volume
// not set up yet (or gone) is an error wrapping errdefs.ErrNotFound.
func (m *Manager) EmptyDirUsage(ctx context.Context, pod *v1.Pod, volume string) (int64, error) {
	dir := filepath.Join(m.volumesDir(pod.UID), EmptyDirPlugin, volume)
	used, err := diskUsage(ctx, dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("emptyDir %q of pod %s/%s is not set up: %w", volume, pod.Namespace, pod.Name, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("measuring emptyDir %q of pod %s/%s: %w", volume, pod.Namespace, pod.Name, err)
	}
	return used, nil
}

// diskUsage sums the allocated size of dir and everything below it on
// dir's filesystem. Entries that vanish while it walks are skipped.
func diskUsage(ctx context.Context, dir string) (int64, error) {
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return 0, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := inode{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev's type differs by architecture
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
