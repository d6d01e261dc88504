// Package boundedread reads input that users hand to the agent (static pod
// manifests, the config file, object folders, HTTP bodies) with a size
// limit, so that no path or server can make the agent read without end: a
// manifest symlink swapped for /dev/zero, a FIFO nobody writes to, a file
// that keeps growing, an endless HTTP body.
//
// File pins the file before looking at it: it opens the path with O_PATH
// (which never triggers a device's open side effects: a watchdog, a tape,
// a terminal), checks on that descriptor that it is a regular file within
// the limit, and reads the same inode through it, never the path again, so
// a swap between the check and the read changes nothing. The read itself is
// limited too, in case the file grows after the check.
//
// Errors from this package do not repeat the path: callers name the file
// (or URL) they read. They wrap errdefs.ErrInvalidArgument and ErrTooLarge
// or ErrNotRegular. It uses only the standard library, x/sys and errdefs.
package boundedread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/errdefs"
)

// The two ways input is refused. Both also match errdefs.ErrInvalidArgument.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than the limit")
)

// File returns the content of the regular file at path (symlinks are
// followed), or an error if it is not a regular file or holds more than
// limit bytes. A missing file gives an error matching fs.ErrNotExist.
func File(path string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("negative limit %d: %w", limit, errdefs.ErrInvalidArgument)
	}
	// O_PATH opens no device and blocks on no FIFO; the descriptor pins
	// the inode that the checks below look at.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() { _ = unix.Close(pfd) }()
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &refused{msg: fmt.Sprintf("%s: %s", ErrNotRegular, describe(st.Mode)), class: ErrNotRegular}
	}
	if st.Size > limit {
		return nil, &refused{msg: fmt.Sprintf("file is %d bytes, %s of %s", st.Size, ErrTooLarge, FormatSize(limit)), class: ErrTooLarge}
	}
	if testHookAfterCheck != nil {
		testHookAfterCheck()
	}
	// Reopening the descriptor through /proc opens the inode checked
	// above, whatever the path points at by now.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(pfd), os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		// %v: a missing /proc must not pass for a missing file.
		return nil, fmt.Errorf("reopen %s through /proc/self/fd (is /proc mounted?): %v", path, errors.Unwrap(err))
	}
	defer func() { _ = f.Close() }()
	return read(f, limit, st.Size)
}

// testHookAfterCheck lets a test swap the path between the checks and the read.
var testHookAfterCheck func()

// All reads r to its end, or fails once more than limit bytes came.
func All(r io.Reader, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("negative limit %d: %w", limit, errdefs.ErrInvalidArgument)
	}
	return read(r, limit, 0)
}

// read reads r with at most limit+1 bytes taken, sizing the buffer by
// hint (the size fstat saw), which is never above limit.
func read(r io.Reader, limit, hint int64) ([]byte, error) {
	buf := make([]byte, 0, hint+1) // +1: the read that finds EOF needs room
	lr := &io.LimitedReader{R: r, N: limit + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, &refused{msg: fmt.Sprintf("%s of %s", ErrTooLarge, FormatSize(limit)), class: ErrTooLarge}
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// FormatSize writes a byte count as people read limits: "10 MiB",
// "256 KiB", or bytes when it is not a round number.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

func describe(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	default:
		return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
	}
}

// refused is input this package will not read.
type refused struct {
	msg   string
	class error
}

func (e *refused) Error() string   { return e.msg }
func (e *refused) Unwrap() []error { return []error{e.class, errdefs.ErrInvalidArgument} }
