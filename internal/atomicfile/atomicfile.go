// Package atomicfile writes files so that a reader sees either the old
// content or the new, never a torn write: the data goes to a temporary file
// in the same directory, which is then renamed over the target. It is the
// one place in minilet that does this; it uses only the standard library so
// that the small container monitor binary can use it too.
package atomicfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Durability says whether a write must survive a machine crash.
type Durability bool

const (
	// Durable fsyncs the file and its directory: the new content survives
	// a crash once WriteFile returns. For state a restart relies on.
	Durable Durability = true
	// Volatile skips fsync: still never torn, but after a crash the old
	// content may come back. For records that only matter while the
	// machine stays up (a container's start record: after a reboot its
	// process is gone anyway).
	Volatile Durability = false
)

// WriteFile replaces path with data, mode perm. The directory must exist.
func WriteFile(path string, data []byte, perm os.FileMode, d Durability) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	name := tmp.Name()
	fail := func(step string, err error) error {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("writing %s: %s: %w", path, step, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail("write", err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail("chmod", err)
	}
	if d == Durable {
		if err := tmp.Sync(); err != nil {
			return fail("fsync", err)
		}
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("writing %s: close: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d == Durable {
		syncDir(dir)
	}
	return nil
}

// WriteJSON replaces path with the JSON encoding of v.
func WriteJSON(path string, v any, perm os.FileMode, d Durability) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return WriteFile(path, data, perm, d)
}

// syncDir makes a rename in dir durable. Best effort: some filesystems
// refuse fsync on a directory, and the data itself is already synced.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
}
