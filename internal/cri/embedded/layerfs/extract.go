package layerfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Extract unpacks a plain archive, such as an image archive, into dir:
// regular files, directories and in-archive links (as symlinks) only, with
// no owners or modes kept. Nothing is written through a symlink the
// archive created.
func Extract(dir string, r io.Reader) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		rel := path.Clean("/" + hdr.Name)
		if rel == "/" {
			continue
		}
		dst := filepath.Join(dir, rel)
		if err := mkdirNoFollow(dir, filepath.Dir(rel)); err != nil {
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		if hdr.Typeflag != tar.TypeDir {
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := mkdirNoFollow(dir, rel); err != nil {
				return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still use TypeRegA
			if _, err := writeFile(dst, tr, buf); err != nil {
				return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink, tar.TypeLink:
			// Old docker archives link duplicate layers; keep the link and
			// check it stays inside dir when it is opened.
			target := hdr.Linkname
			if hdr.Typeflag == tar.TypeLink {
				target, _ = filepath.Rel(filepath.Dir(dst), filepath.Join(dir, path.Clean("/"+hdr.Linkname)))
			}
			if err := os.Symlink(target, dst); err != nil {
				return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
		}
	}
}

// mkdirNoFollow creates the directory rel (slash-separated, clean, rooted)
// under base, refusing to pass through symlinks.
func mkdirNoFollow(base, rel string) error {
	cur := base
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" {
			continue
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case err == nil && fi.IsDir():
		case err == nil:
			return fmt.Errorf("%s is not a directory", strings.TrimPrefix(cur, base))
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, 0o700); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// writeFile creates dst (which must not exist), mode 0600, with what r
// holds, copying through buf.
func writeFile(dst string, r io.Reader, buf []byte) (int64, error) {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(f, r, buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
