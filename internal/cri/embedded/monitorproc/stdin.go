package monitorproc

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// SocketPath is a path to file in dir that fits a unix socket address
// however long dir is: through the descriptor of dir, which the caller
// closes when done with the path.
func SocketPath(dir, file string) (string, *os.File, error) {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), file), d, nil
}

// serveStdin feeds the container's stdin (w) from connections to the
// attach socket in dir, one after another in the order they come; with
// once, stdin closes when the first connection ends. stop closes the
// socket.
func serveStdin(dir string, w *os.File, once bool) (stop func(), err error) {
	path, d, err := SocketPath(dir, FileAttach)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }()
	_ = os.Remove(filepath.Join(dir, FileAttach))
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Only the agent (root) may write into a container's stdin.
	_ = os.Chmod(filepath.Join(dir, FileAttach), 0o600)
	var mu sync.Mutex
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				mu.Lock()
				defer mu.Unlock()
				_, _ = io.Copy(w, conn)
				if once {
					_ = w.Close()
					_ = ln.Close()
				}
			}()
		}
	}()
	return func() {
		_ = ln.Close()
		_ = w.Close()
		_ = os.Remove(filepath.Join(dir, FileAttach))
	}, nil
}
