package layerfs

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// OverlaySupported reports whether overlayfs mounts work in dir's
// filesystem; where they do not, containers get a Flatten copy instead.
func OverlaySupported(dir string) bool {
	tmp, err := os.MkdirTemp(dir, "overlay-probe-")
	if err != nil {
		return false
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	var paths []string
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		p := filepath.Join(tmp, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			return false
		}
		paths = append(paths, p)
	}
	opts := "lowerdir=" + paths[0] + ",upperdir=" + paths[1] + ",workdir=" + paths[2]
	if err := unix.Mount("overlay", paths[3], "overlay", 0, opts); err != nil {
		return false
	}
	_ = unix.Unmount(paths[3], unix.MNT_DETACH)
	return true
}
