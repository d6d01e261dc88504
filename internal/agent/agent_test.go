package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/config"
)

// TestRunFailsCleanlyOnABusyPort: a setup step that fails late (the
// read-only port is taken, found after the pod workers, devices, cgroups
// and prober were started) is returned with the flag's name, and Run
// does not hang waiting for what it had started. Root-only: the agent
// makes real cgroups.
func TestRunFailsCleanlyOnABusyPort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent creates cgroups")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	dir := t.TempDir()
	o := config.NewOptions()
	o.RootDir = filepath.Join(dir, "root")
	o.DevicePluginDir = filepath.Join(dir, "plugins")
	o.HostnameOverride = "agent-test"
	o.CgroupRoot = "/minilet-agent-test"
	o.Port = 0 // a free port: the read-only port is the busy one
	o.ReadOnlyPort = int32(busy.Addr().(*net.TCPAddr).Port)
	t.Cleanup(func() { removeCgroupTree(t, o.CgroupRoot) })
	cfg, err := config.Load(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after a failed setup step")
	}
	if err == nil || !strings.Contains(err.Error(), "--read-only-port") || errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want the --read-only-port error", err)
	}
}

// removeCgroupTree removes a cgroup and its children from every v1
// hierarchy (they are empty: the test started no pod).
func removeCgroupTree(t *testing.T, name string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, name), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				t.Logf("leaving cgroup %s: %v", dirs[i], err)
			}
		}
	}
}
