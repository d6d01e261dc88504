package hostlock

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

// A second agent is refused while the first holds the lock, and is told
// who holds it.
func TestSecondHolderIsRefusedWithTheFirstsRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks", "x.lock")
	first, err := Acquire(path, Holder{PID: 123, RootDir: "/var/lib/minilet"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	_, err = Acquire(path, Holder{PID: 456, RootDir: "/srv/other"})
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second Acquire: %v, want a HeldError (conflict)", err)
	}
	if held.Holder != (Holder{PID: 123, RootDir: "/var/lib/minilet"}) {
		t.Errorf("holder %+v, want the first agent's record", held.Holder)
	}
	if want := "held by the minilet with root dir /var/lib/minilet (pid 123)"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

// Released, the lock goes to the next agent, which learns who held it
// before.
func TestReleasedLockPassesOnWithThePreviousHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	first, err := Acquire(path, Holder{PID: 1, RootDir: "/a"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Previous != (Holder{}) {
		t.Errorf("fresh lock: previous %+v, want none", first.Previous)
	}
	first.Release()
	first.Release() // idempotent
	second, err := Acquire(path, Holder{PID: 2, RootDir: "/bb"})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer second.Release()
	if second.Previous != (Holder{PID: 1, RootDir: "/a"}) {
		t.Errorf("previous %+v, want the first holder", second.Previous)
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != `{"pid":2,"rootDir":"/bb"}` {
		t.Errorf("record %q: the shorter record must replace the longer one whole", b)
	}
}

const helperEnv = "HOSTLOCK_TEST_HOLD"

// TestHelperHolds is not a test: run by the test below as another
// process, it takes the lock, says so and waits to be killed.
func TestHelperHolds(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	l, err := Acquire(path, Self("/helper"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	os.Stdout.WriteString("locked\n")
	select {}
}

// An agent that died (SIGKILL, no cleanup) does not block the next one.
func TestLockOfAKilledProcessDoesNotBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolds$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("helper: %q %v", line, err)
	}
	_, err = Acquire(path, Self("/me"))
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.PID != cmd.Process.Pid || held.Holder.RootDir != "/helper" {
		t.Errorf("while the helper lives: %v, want held by pid %d", err, cmd.Process.Pid)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	l, err := Acquire(path, Self("/me"))
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	defer l.Release()
	if l.Previous.PID != cmd.Process.Pid {
		t.Errorf("previous %+v, want the dead helper", l.Previous)
	}
}

// Remove refuses a held lock; a free one is removed, and a holder that
// opened the file before the removal cannot end up holding the unlinked
// file while the next agent holds a new one.
func TestRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if err := Remove(path); err != nil {
		t.Fatalf("Remove of a missing lock: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove of a missing lock created it: %v", err)
	}
	l, err := Acquire(path, Self("/a"))
	if err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if err := Remove(path); !errors.As(err, &held) {
		t.Fatalf("Remove while held: %v, want a HeldError", err)
	}
	l.Release()
	// A file opened before the removal, as a racing agent's would be.
	stale, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stale.Close() }()
	if err := Remove(path); err != nil {
		t.Fatalf("Remove of a free lock: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file still there: %v", err)
	}
	if samePath(stale, path) {
		t.Fatal("the unlinked file still counts as the lock")
	}
	next, err := Acquire(path, Self("/b"))
	if err != nil {
		t.Fatalf("after Remove: %v", err)
	}
	defer next.Release()
	if !samePath(next.f, path) {
		t.Error("the new holder does not hold the file at path")
	}
}
