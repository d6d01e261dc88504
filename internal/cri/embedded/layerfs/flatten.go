package layerfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Flatten copies layer directories (overlayfs format, base first) into
// dst as the merged view an overlay mount would show: a 0/0 character device
// deletes what lower layers had at its path, an opaque directory hides their
// contents. Used where overlayfs cannot be mounted.
func Flatten(layers []string, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for _, layer := range layers {
		links := map[uint64]string{} // inode -> first copy, to keep hard links
		err := filepath.Walk(layer, func(src string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(layer, src)
			target := filepath.Join(dst, rel)
			st, _ := fi.Sys().(*syscall.Stat_t)
			if rel == "." {
				return copyMeta(src, target, fi, st)
			}
			if fi.Mode()&os.ModeCharDevice != 0 && st != nil && st.Rdev == 0 {
				return os.RemoveAll(target) // whiteout
			}
			if old, err := os.Lstat(target); err == nil && (!old.IsDir() || !fi.IsDir()) {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
			}
			switch {
			case fi.IsDir():
				if v, err := getXattr(src, overlayOpaqueXattr); err == nil && v == "y" {
					if err := os.RemoveAll(target); err != nil {
						return err
					}
				}
				if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			case fi.Mode()&os.ModeSymlink != 0:
				l, err := os.Readlink(src)
				if err != nil {
					return err
				}
				if err := os.Symlink(l, target); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				if st != nil && st.Nlink > 1 {
					if first, ok := links[st.Ino]; ok {
						return os.Link(first, target)
					}
					links[st.Ino] = target
				}
				if err := copyFile(src, target, buf); err != nil {
					return err
				}
			default: // devices, fifos, sockets
				if st == nil {
					return nil
				}
				if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
					return err
				}
			}
			return copyMeta(src, target, fi, st)
		})
		if err != nil {
			return fmt.Errorf("copy layer %s: %w", filepath.Base(layer), err)
		}
	}
	return nil
}

func copyFile(src, dst string, buf []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	_, err = writeFile(dst, in, buf)
	return err
}

func copyMeta(src, dst string, fi os.FileInfo, st *syscall.Stat_t) error {
	if st != nil {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return setTimes(dst, fi.ModTime(), true)
	}
	if err := os.Chmod(dst, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
		return err
	}
	return setTimes(dst, fi.ModTime(), false)
}

func getXattr(p, name string) (string, error) {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
