package volumes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// File is one file of a volume's payload.
type File struct {
	Data []byte
	Mode os.FileMode
}

// dataLink is the symlink that names the current payload directory. The
// volume's visible entries are symlinks through it, so replacing the
// payload is one rename: a reader sees the old set or the new one, never a
// mix (the layout the kubelet uses, which applications rely on when they
// watch ..data for changes).
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
)

// validPath checks a payload path as the kubelet does: relative, no ".."
// element, not starting with "..".
func validPath(p string) error {
	switch {
	case p == "":
		return errors.New("path must not be empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("path %q must be relative", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("path %q must not start with '..'", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
	}
	return nil
}

// writeAtomic makes dir hold exactly payload (paths relative to dir):
// unchanged content is left alone; otherwise the payload is written to a
// new hidden directory, ..data is switched to it in one rename, visible
// top-level entries are linked through ..data, stale ones removed, and the
// previous payload directory deleted. It reports whether anything changed.
//
// With gid (the pod's fsGroup; -1 for none) the payload's files and
// directories belong to that group, the files group-readable and the
// directories setgid and group-searchable, as the kubelet makes a
// read-only volume's content for an fsGroup: the containers' processes,
// which have the group, can read what defaultMode keeps from others.
func writeAtomic(dir string, payload map[string]File, gid int) (bool, error) {
	for p, f := range payload {
		if err := validPath(p); err != nil {
			return false, err
		}
		if gid >= 0 {
			f.Mode |= 0o440
			payload[p] = f
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	if old != "" && same(filepath.Join(dir, old), payload) {
		return false, nil
	}
	ts, err := os.MkdirTemp(dir, "..payload-")
	if err != nil {
		return false, err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return false, err
	}
	for p, f := range payload {
		full := filepath.Join(ts, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(full, f.Data, f.Mode); err != nil {
			return false, err
		}
		if err := os.Chmod(full, f.Mode); err != nil { // umask-free
			return false, err
		}
	}
	if gid >= 0 {
		if err := shareWithGroup(ts, gid); err != nil {
			return false, err
		}
	}
	tmp := filepath.Join(dir, dataLinkTmp)
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}
	top := map[string]bool{}
	for p := range payload {
		top[strings.SplitN(p, "/", 2)[0]] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, "..") && !top[n] {
			_ = os.RemoveAll(filepath.Join(dir, n))
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return true, nil
}

// shareWithGroup gives gid the payload directory dir and all in it:
// directories setgid and group-searchable (files' modes are set already).
func shareWithGroup(dir string, gid int) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return fmt.Errorf("fsGroup %d: %w", gid, err)
		}
		if !d.IsDir() {
			return nil
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		return os.Chmod(p, st.Mode().Perm()|0o110|os.ModeSetgid)
	})
}

// same reports whether dir holds exactly payload, modes included.
func same(dir string, payload map[string]File) bool {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		found = append(found, rel)
		return nil
	})
	if err != nil || len(found) != len(payload) {
		return false
	}
	sort.Strings(found)
	for _, rel := range found {
		f, ok := payload[rel]
		if !ok {
			return false
		}
		st, err := os.Stat(filepath.Join(dir, rel))
		if err != nil || st.Mode().Perm() != f.Mode.Perm() {
			return false
		}
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || !bytes.Equal(data, f.Data) {
			return false
		}
	}
	return true
}
