package images

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// FsStats describes the image filesystem in bytes and inodes.
type FsStats struct {
	Capacity     int64 // total bytes
	Available    int64 // bytes available to unprivileged users
	UsedByImages int64 // bytes the runtime reports its images use
	Inodes       int64
	InodesFree   int64
}

// DiskStats reports the image filesystem's usage.
type DiskStats interface {
	ImageFsStats(ctx context.Context) (FsStats, error)
}

// FsInfoer is the runtime's ImageFsInfo call.
type FsInfoer interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// StatfsDisk measures the image filesystem: the runtime's ImageFsInfo
// for the bytes its images use (and where they live), statfs of Path
// (or, if Path is empty, of the mount point the runtime reports) for
// capacity and free space.
type StatfsDisk struct {
	Runtime FsInfoer // may be nil when Path is set
	Path    string
}

var _ DiskStats = StatfsDisk{}

// ImageFsStats implements DiskStats.
func (d StatfsDisk) ImageFsStats(ctx context.Context) (FsStats, error) {
	var out FsStats
	path := d.Path
	if d.Runtime != nil {
		resp, err := d.Runtime.ImageFsInfo(ctx)
		if err != nil {
			return out, fmt.Errorf("image filesystem info: %w", err)
		}
		for _, fs := range resp.GetImageFilesystems() {
			out.UsedByImages += int64(fs.GetUsedBytes().GetValue())
			if path == "" {
				path = fs.GetFsId().GetMountpoint()
			}
		}
	}
	if path == "" {
		return out, fmt.Errorf("%w: image filesystem: no path given and the runtime reports no mount point", errdefs.ErrInvalidArgument)
	}
	st, err := Statfs(path)
	if err != nil {
		return out, err
	}
	out.Capacity, out.Available, out.Inodes, out.InodesFree = st.Capacity, st.Available, st.Inodes, st.InodesFree
	return out, nil
}

// Statfs returns the capacity, available bytes and inodes of the
// filesystem holding path.
func Statfs(path string) (FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FsStats{}, fmt.Errorf("%w: statfs %s: %v", errdefs.ErrUnavailable, path, err)
	}
	bs := int64(st.Bsize) //nolint:unconvert // Bsize's type differs across architectures
	return FsStats{
		Capacity:   int64(st.Blocks) * bs,
		Available:  int64(st.Bavail) * bs,
		Inodes:     int64(st.Files),
		InodesFree: int64(st.Ffree),
	}, nil
}
