package harness

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Each test process builds the agent into a directory of its own under the
// temporary directory (binDirPattern). A test process has no hook at its
// end to remove it, so the directory is marked in use instead: the process
// holds a shared flock on its inUseFile for its whole life (the kernel
// drops it when the process ends, however it ends). The next test process
// to build removes every such directory nobody holds any more. Without
// this each test process left ~100 MB behind, and a machine running tests
// all day filled its disk until the agents under test saw DiskPressure.
const (
	binDirPattern = "minilet-bin"
	inUseFile     = ".in-use"
	// sweepMinAge keeps a directory too young to have taken its lock yet
	// (between MkdirTemp and flock) out of the sweep.
	sweepMinAge = 10 * time.Minute
)

// makeBinDir creates this process's binary directory, marks it in use and
// removes the directories of test processes that have ended.
func makeBinDir() (string, error) {
	dir, err := os.MkdirTemp("", binDirPattern)
	if err != nil {
		return "", err
	}
	// A raw descriptor, never closed (an *os.File would be closed by its
	// finalizer once unreferenced): the lock lasts as long as the process.
	fd, err := syscall.Open(filepath.Join(dir, inUseFile), syscall.O_CREAT|syscall.O_RDONLY|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return "", err
	}
	if err := syscall.Flock(fd, syscall.LOCK_SH); err != nil {
		_ = syscall.Close(fd)
		return "", err
	}
	sweepBinDirs(os.TempDir(), dir, time.Now())
	return dir, nil
}

// sweepBinDirs removes the binary directories under tmp, other than keep,
// that no process holds: older than sweepMinAge and either without a lock
// file (made before there was one) or with a lock nobody holds.
func sweepBinDirs(tmp, keep string, now time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, binDirPattern+"*"))
	for _, d := range dirs {
		if d == keep {
			continue
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() || now.Sub(st.ModTime()) < sweepMinAge {
			continue
		}
		if unheld(filepath.Join(d, inUseFile)) {
			_ = os.RemoveAll(d)
		}
	}
}

// unheld reports whether no process holds the lock file (a missing file
// counts as unheld). The exclusive lock taken to find out is dropped when
// the file is closed.
func unheld(lockPath string) bool {
	f, err := os.Open(lockPath)
	if os.IsNotExist(err) {
		return true
	}
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
