package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/minilet/minilet/internal/atomicfile"
	"github.com/minilet/minilet/internal/errdefs"
)

// AddrFileName is the file under the agent's root dir that holds the
// address of its HTTPS API, so the CLI finds a local agent listening on any
// port.
const AddrFileName = "minilet.addr"

// WriteAddrFile records the server's listen address as "host:port" (a
// wildcard host replaced by loopback) in <rootDir>/minilet.addr, replacing
// the file atomically.
func WriteAddrFile(rootDir, addr string) error {
	if addr == "" {
		return fmt.Errorf("write address file: empty address: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	addr = dialable(addr)
	path := filepath.Join(rootDir, AddrFileName)
	if err := atomicfile.WriteFile(path, []byte(addr+"\n"), 0o644, atomicfile.Volatile); err != nil {
		return fmt.Errorf("write address file: %w", err)
	}
	return nil
}

// dialable turns a wildcard listen address (0.0.0.0, ::) into the loopback
// address of the same family, which a local client can connect to.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	ip := net.ParseIP(host)
	switch {
	case host == "":
		return net.JoinHostPort("127.0.0.1", port)
	case ip == nil || !ip.IsUnspecified():
		return addr
	case ip.To4() != nil:
		return net.JoinHostPort("127.0.0.1", port)
	default:
		return net.JoinHostPort("::1", port)
	}
}

// ReadAddrFile returns the agent's URL ("https://host:port") from the address
// recorded by WriteAddrFile, or an error wrapping errdefs.ErrNotFound when
// there is none.
func ReadAddrFile(rootDir string) (string, error) {
	path := filepath.Join(rootDir, AddrFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("address file %s: %w", path, errdefs.ErrNotFound)
		}
		return "", fmt.Errorf("read address file %s: %w", path, err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return "", fmt.Errorf("address file %s is empty: %w", path, errdefs.ErrNotFound)
	}
	if !strings.Contains(u, "://") {
		u = "https://" + u
	}
	return u, nil
}
