package boundedread

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestFileReadsRegularFilesAndSymlinks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pod.yaml")
	want := []byte("kind: Pod\n")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		got, err := File(p, int64(len(want))) // exactly at the limit is fine
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("File(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if got, err := File(empty, 10); err != nil || len(got) != 0 {
		t.Errorf("File(empty) = %q, %v", got, err)
	}
}

func TestFileRefusesWhatIsNotARegularFileAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := filepath.Join(dir, "swapped.yaml") // a manifest link now pointing at /dev/zero
	if err := os.Symlink("/dev/zero", swapped); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub.yaml")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file: a named pipe (FIFO)"},
		{swapped, "not a regular file: a character device"},
		{"/dev/zero", "not a regular file: a character device"},
		{sub, "not a regular file: a directory"},
	} {
		start := time.Now()
		got, err := File(tc.path, 10<<20)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("File(%s) took %v", tc.path, took)
		}
		if err == nil || got != nil {
			t.Fatalf("File(%s) = %d bytes, %v; want an error", tc.path, len(got), err)
		}
		if !errors.Is(err, ErrNotRegular) || !errdefs.IsInvalidArgument(err) || err.Error() != tc.want {
			t.Errorf("File(%s) error = %q; want %q, matching ErrNotRegular and ErrInvalidArgument", tc.path, err, tc.want)
		}
	}
}

func TestFileRefusesOversizeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 1<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := File(path, 1<<20)
	if !errors.Is(err, ErrTooLarge) || !errdefs.IsInvalidArgument(err) {
		t.Fatalf("File = %v; want ErrTooLarge", err)
	}
	if want := "file is 1048577 bytes, larger than the limit of 1 MiB"; err.Error() != want {
		t.Errorf("error = %q; want %q", err, want)
	}
}

func TestFileMissingIsNotExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone.yaml")
	_, err := File(path, 10)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("File = %v; want fs.ErrNotExist naming %s", err, path)
	}
}

// The inode checked is the inode read: a path swapped for /dev/zero
// between the checks and the read (the race that once made the agent read
// gigabytes) still reads the checked file.
func TestFileReadsTheCheckedInodeWhenThePathIsSwapped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	testHookAfterCheck = func() {
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookAfterCheck = nil }()
	got, err := File(path, 10)
	if err != nil || string(got) != "old" {
		t.Errorf("File = %q, %v; want the checked file's content", got, err)
	}
}

// A file that grows past the limit after the size check is cut off.
func TestFileRefusesAFileThatGrowsAfterTheCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	testHookAfterCheck = func() {
		if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 4096), 0o644); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookAfterCheck = nil }()
	if _, err := File(path, 1024); !errors.Is(err, ErrTooLarge) {
		t.Errorf("File = %v; want ErrTooLarge", err)
	}
}

func TestAllLimitsEndlessReaders(t *testing.T) {
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	_, err = All(zero, 4<<20)
	if !errors.Is(err, ErrTooLarge) || err.Error() != "larger than the limit of 4 MiB" {
		t.Errorf("All(/dev/zero) = %v; want ErrTooLarge naming 4 MiB", err)
	}
	got, err := All(strings.NewReader("abc"), 3)
	if err != nil || string(got) != "abc" {
		t.Errorf("All(abc, 3) = %q, %v", got, err)
	}
	if _, err := All(io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")), 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("All(abcd, 3) = %v; want ErrTooLarge", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{10 << 20: "10 MiB", 256 << 10: "256 KiB", 1000: "1000 bytes", 0: "0 bytes"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q; want %q", n, got, want)
		}
	}
}
