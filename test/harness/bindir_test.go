package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A binary directory is removed once the process holding it has ended,
// and kept while a process holds it or while it is too young to tell.
func TestSweepRemovesOnlyDirectoriesOfEndedProcesses(t *testing.T) {
	tmp := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(name string, lock bool, mtime time.Time) string {
		d := filepath.Join(tmp, binDirPattern+name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(d, inUseFile), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(d, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ended := mk("ended", true, old)    // its process is gone: nobody holds the lock
	legacy := mk("legacy", false, old) // from before lock files
	young := mk("young", false, time.Now())
	held := mk("held", true, old)
	mine := mk("mine", true, old)

	// Another process holds held's lock, as a live test process does.
	holder := exec.Command("flock", "-s", filepath.Join(held, inUseFile), "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Skipf("no flock(1) to hold a lock from another process: %v", err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	waitLocked(t, filepath.Join(held, inUseFile))
	if err := os.Chtimes(held, old, old); err != nil { // the lock file's creation touched it
		t.Fatal(err)
	}

	sweepBinDirs(tmp, mine, time.Now())

	for d, want := range map[string]bool{ended: false, legacy: false, young: true, held: true, mine: true} {
		_, err := os.Stat(d)
		if got := err == nil; got != want {
			t.Errorf("%s: exists %v after the sweep, want %v", filepath.Base(d), got, want)
		}
	}
}

// waitLocked waits until another process holds path's lock.
func waitLocked(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for time.Now().Before(deadline) {
		if f, err := os.Open(path); err == nil {
			busy := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
			f.Close()
			if busy {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nobody took the lock on %s", path)
}
