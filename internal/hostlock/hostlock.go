// Package hostlock gives one agent the exclusive use of something other
// agents on the host could also be pointed at: its root dir, a cgroup
// root, the device-plugin directory. A lock is an flock(2) on a small
// file, held for the agent's lifetime; the kernel drops it when the
// process dies, so a crashed agent never blocks the next one. The file
// also records who holds it (pid and root dir), for the error a second
// agent prints, and stays behind as a record of the last holder.
package hostlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/errdefs"
)

// Holder is what a lock file records about the agent holding it.
type Holder struct {
	PID     int    `json:"pid"`
	RootDir string `json:"rootDir"`
}

// Self is the holder record of this process for an agent with rootDir.
func Self(rootDir string) Holder { return Holder{PID: os.Getpid(), RootDir: rootDir} }

// HeldError is returned when a live process holds the lock. It matches
// errdefs.ErrConflict.
type HeldError struct {
	Path   string
	Holder Holder // zero when the holder had not written its record yet
}

func (e *HeldError) Error() string {
	if e.Holder.RootDir == "" {
		return "held by another minilet (lock file " + e.Path + ")"
	}
	return fmt.Sprintf("held by the minilet with root dir %s (pid %d)", e.Holder.RootDir, e.Holder.PID)
}

// Unwrap classifies the error as a conflict.
func (e *HeldError) Unwrap() error { return errdefs.ErrConflict }

// Lock is a held lock. Release it, or let the process end.
type Lock struct {
	f *os.File
	// Previous is the record the last holder left (zero if none): who
	// held the lock before, e.g. an agent that has since stopped.
	Previous Holder
}

// Acquire takes the lock at path (see TryLock) and records me in it.
func Acquire(path string, me Holder) (*Lock, error) {
	l, err := TryLock(path)
	if err != nil {
		return nil, err
	}
	if err := l.Record(me); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// TryLock takes the lock at path without waiting, creating the file and
// its directory if needed, and reads the last holder's record into
// Previous; it records nothing, so that a caller who decides not to keep
// the lock leaves the record as it was. If a live process holds the
// lock, the error is a *HeldError naming that process.
func TryLock(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flock(f); err != nil {
			holder, _ := readHolder(f)
			_ = f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &HeldError{Path: path, Holder: holder}
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// Remove may have unlinked the file between the open and the
		// flock: a lock on an unlinked file guards nothing, since the next
		// agent creates and locks a new one. Try again on the new file.
		if !samePath(f, path) {
			_ = f.Close()
			continue
		}
		prev, _ := readHolder(f) // a torn or foreign record is no holder
		return &Lock{f: f, Previous: prev}, nil
	}
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	var held, named unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &named) != nil {
		return false
	}
	return held.Dev == named.Dev && held.Ino == named.Ino
}

// Remove deletes the lock file at path if no live process holds it (a
// *HeldError otherwise), for `minilet cleanup` once an agent is gone for
// good. It removes the file while holding the lock, and TryLock checks
// that the file it locked is still the one at path, so no two agents can
// ever each hold a lock on a different file of the same name.
func Remove(path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	l, err := TryLock(path)
	if err != nil {
		return err
	}
	defer l.Release()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove lock %s: %w", path, err)
	}
	return nil
}

// Record writes me as the lock's holder.
func (l *Lock) Record(me Holder) error {
	if err := writeHolder(l.f, me); err != nil {
		return fmt.Errorf("lock %s: recording the holder: %w", l.f.Name(), err)
	}
	return nil
}

// Release drops the lock; the file and its record stay. Release is
// idempotent.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Close() // closing the only descriptor drops the flock
	l.f = nil
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// maxRecord bounds what is read back from a lock file.
const maxRecord = 4096

func readHolder(f *os.File) (Holder, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxRecord))
	if err != nil {
		return Holder{}, err
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return Holder{}, err
	}
	return h, nil
}

func writeHolder(f *os.File, h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	return err
}
