// Package layerfs keeps image layers as directories in overlayfs' own
// format, so that a container's root filesystem is an overlay mount of
// them: it unpacks a layer's tar stream into such a directory (whiteouts
// become 0/0 character devices, opaque directories an xattr), merges a
// stack of them by copying where overlayfs cannot be mounted, and finds
// out whether it can. It also extracts plain archives (image archives)
// with the same care not to write outside the target directory.
package layerfs

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// OCI whiteout markers in layer tarballs.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	whiteoutMeta   = ".wh..wh." // other aufs metadata, ignored
)

// overlayOpaqueXattr marks a directory whose lower-layer contents are hidden;
// layers are stored in overlayfs' own format (whiteouts are 0/0 character
// devices), so that their directories can be stacked as lowerdirs directly.
const overlayOpaqueXattr = "trusted.overlay.opaque"

// Stats is what unpacking a layer found.
type Stats struct {
	Size   uint64 `json:"size"`   // bytes of file content (hard links once)
	Inodes uint64 `json:"inodes"` // entries created
	DiffID string `json:"diffId"` // sha256 of the uncompressed tar stream
}

// Unpack extracts an uncompressed layer tar stream into dir (which must
// be empty) in overlayfs format: ".wh.NAME" becomes a 0/0 character device
// NAME, ".wh..wh..opq" the opaque xattr on its directory. Ownership,
// permissions (including setuid bits), times, symlinks, hard links, devices
// and xattrs are kept. No entry may escape dir, through ".." or through a
// symlink the layer itself created.
func Unpack(dir string, r io.Reader) (Stats, error) {
	var st Stats
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(r, h))
	u := &unpacker{root: dir, dirs: map[string]bool{"/": true}, buf: make([]byte, 1<<20)}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read layer tar: %w", err)
		}
		added, err := u.entry(hdr, tr)
		if err != nil {
			return st, err
		}
		st.Inodes += added.Inodes
		st.Size += added.Size
	}
	// Drain trailing padding so that the digest covers the whole stream.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, h)); err != nil {
		return st, fmt.Errorf("read layer tar: %w", err)
	}
	// Directory times last: creating their children changed them.
	for i := len(u.dirTimes) - 1; i >= 0; i-- {
		d := u.dirTimes[i]
		_ = setTimes(d.path, d.mtime, false)
	}
	st.DiffID = fmt.Sprintf("sha256:%x", h.Sum(nil))
	return st, nil
}

type dirTime struct {
	path  string
	mtime time.Time
}

type unpacker struct {
	root     string
	dirs     map[string]bool // clean in-layer paths known to be real directories
	dirTimes []dirTime
	buf      []byte
}

// entry applies one tar entry.
func (u *unpacker) entry(hdr *tar.Header, tr io.Reader) (Stats, error) {
	var st Stats
	name := path.Clean("/" + hdr.Name)
	if name == "/" {
		if hdr.Typeflag == tar.TypeDir {
			_ = u.applyMeta(u.root, hdr)
		}
		return st, nil
	}
	parent, base := path.Split(name)
	parent = path.Clean(parent)
	if err := u.ensureDir(parent); err != nil {
		return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	dst := filepath.Join(u.root, name)
	switch {
	case base == whiteoutOpaque:
		if err := unix.Lsetxattr(filepath.Join(u.root, parent), overlayOpaqueXattr, []byte("y"), 0); err != nil {
			return st, fmt.Errorf("layer entry %q: mark opaque: %w", hdr.Name, err)
		}
		return st, nil
	case strings.HasPrefix(base, whiteoutMeta):
		return st, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		target := filepath.Join(u.root, parent, strings.TrimPrefix(base, whiteoutPrefix))
		_ = os.RemoveAll(target)
		if err := unix.Mknod(target, unix.S_IFCHR, 0); err != nil {
			return st, fmt.Errorf("layer entry %q: whiteout: %w", hdr.Name, err)
		}
		st.Inodes = 1
		return st, nil
	}
	if hdr.Typeflag != tar.TypeDir {
		// A later entry replaces an earlier one of the same name.
		if fi, err := os.Lstat(dst); err == nil && (!fi.IsDir() || hdr.Typeflag != tar.TypeDir) {
			if err := os.RemoveAll(dst); err != nil {
				return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
			}
			delete(u.dirs, name)
		}
	}
	st.Inodes = 1
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := os.Lstat(dst); err == nil && !fi.IsDir() {
			_ = os.Remove(dst)
		}
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		u.dirs[name] = true
		u.dirTimes = append(u.dirTimes, dirTime{dst, hdr.ModTime})
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still use TypeRegA
		n, err := writeFile(dst, tr, u.buf)
		if err != nil {
			return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		st.Size = uint64(n)
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, dst); err != nil {
			return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	case tar.TypeLink:
		target := path.Clean("/" + hdr.Linkname)
		tdir, _ := path.Split(target)
		if !u.dirs[path.Clean(tdir)] {
			return st, fmt.Errorf("layer entry %q: hard link target %q is not in this layer", hdr.Name, hdr.Linkname)
		}
		if err := os.Link(filepath.Join(u.root, target), dst); err != nil {
			return st, fmt.Errorf("layer entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, err)
		}
		st.Inodes = 0
		return st, nil // a hard link shares its target's metadata
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode = unix.S_IFCHR
		case tar.TypeBlock:
			mode = unix.S_IFBLK
		}
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknod(dst, mode|uint32(hdr.Mode&0o7777), int(dev)); err != nil {
			return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	default:
		return Stats{}, nil // e.g. PAX global headers: nothing on disk
	}
	if err := u.applyMeta(dst, hdr); err != nil {
		return st, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
	}
	return st, nil
}

// ensureDir makes sure the in-layer directory p exists as a real directory,
// creating missing parents (mode 0755, root-owned, as other unpackers do).
func (u *unpacker) ensureDir(p string) error {
	if u.dirs[p] {
		return nil
	}
	if err := u.ensureDir(path.Dir(p)); err != nil {
		return err
	}
	full := filepath.Join(u.root, p)
	fi, err := os.Lstat(full)
	switch {
	case err == nil && fi.IsDir():
	case err == nil:
		return fmt.Errorf("parent %q is not a directory (%s)", p, fi.Mode().Type())
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(full, 0o755); err != nil {
			return err
		}
	default:
		return err
	}
	u.dirs[p] = true
	return nil
}

// applyMeta sets ownership, mode, xattrs and times of a created entry.
func (u *unpacker) applyMeta(dst string, hdr *tar.Header) error {
	if err := os.Lchown(dst, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			// Best effort: some filesystems refuse some namespaces.
			_ = unix.Lsetxattr(dst, x, []byte(v), 0)
		}
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return setTimes(dst, hdr.ModTime, true)
	}
	// After chown, which clears setuid/setgid bits.
	if err := os.Chmod(dst, hdr.FileInfo().Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if hdr.Typeflag == tar.TypeDir {
		return nil
	}
	return setTimes(dst, hdr.ModTime, false)
}

func setTimes(p string, mtime time.Time, nofollow bool) error {
	if mtime.IsZero() {
		return nil
	}
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	flags := 0
	if nofollow {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, flags)
}
