package devicemanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/minilet/minilet/internal/hostlock"
)

// A second agent on the same plugin dir does not take it over: it fails
// to start, naming the first, and the first's kubelet.sock and the
// plugins' sockets stay as they were. Once the first stops, the dir is
// free again.
func TestSecondManagerOnOnePluginDirIsRefused(t *testing.T) {
	dir := shortDir(t)
	first := startManager(t, dir, Config{Owner: "/var/lib/first"}, nil)
	p := startPlugin(t, first, "p.sock", "d0")
	first.waitCounts(t, testResource, 1, 1)
	sockBefore := inode(t, filepath.Join(dir, KubeletSocket))
	pluginBefore := inode(t, filepath.Join(dir, "p.sock"))

	second, err := New(Config{PluginDir: dir, Owner: "/var/lib/second"}, nil, nil, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(context.Background())
	var held *hostlock.HeldError
	if !errors.As(err, &held) || held.Holder.RootDir != "/var/lib/first" || held.Holder.PID != os.Getpid() {
		t.Fatalf("second Start: %v, want held by the first manager's agent", err)
	}
	second.Stop()
	if got := inode(t, filepath.Join(dir, KubeletSocket)); got != sockBefore {
		t.Error("kubelet.sock was replaced by the refused manager")
	}
	if got := inode(t, filepath.Join(dir, "p.sock")); got != pluginBefore {
		t.Error("the plugin's socket was removed by the refused manager")
	}
	if c, a := first.counts(testResource); c != 1 || a != 1 {
		t.Errorf("first manager's resource: %d/%d, want 1/1", c, a)
	}
	p.kill()

	first.m.Stop()
	third := startManager(t, dir, Config{Owner: "/var/lib/third"}, nil)
	if _, err := os.Stat(filepath.Join(third.dir, KubeletSocket)); err != nil {
		t.Fatalf("after the first stopped, the next manager serves: %v", err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}
